"""Task types: the allowlist of what may be submitted and run, with each type's policy."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .config import ms
from .errors import BadArgs, UnknownTaskType
from .keys import valid_queue
from .rates import Rate, check_shared

DEFAULT_TIMEOUT = 600.0  # an attempt's timeout, seconds

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
_STAGE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
INTERNAL_PREFIX = "ghostless."  # the engine's own types (engine/core/notify.py): never submittable by users


@dataclass(frozen=True)
class Backoff:
    """Retry delays: exponential (``base * factor**(n-1)``, capped) or an explicit schedule.

    ``jitter`` (0..1) takes up to that fraction off each delay at random, so
    retries of many tasks that failed together spread out. The delay is
    computed inside the fail/expire scripts (lua/lib/backoff.lua) from
    :meth:`spec`, stored on the task at submit.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.1
    schedule: tuple[float, ...] = ()

    @classmethod
    def exponential(cls, base=1.0, factor=2.0, cap=300.0, jitter=0.1) -> Backoff:
        return cls(base=base, factor=factor, cap=cap, jitter=jitter)

    @classmethod
    def fixed(cls, delays: Sequence[float], jitter: float = 0.0) -> Backoff:
        return cls(schedule=tuple(delays), jitter=jitter)

    def __post_init__(self):
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within 0..1")
        if self.base < 0 or self.factor < 1 or self.cap < 0 or any(d < 0 for d in self.schedule):
            raise ValueError("backoff delays must be >= 0 and factor >= 1")

    def spec(self) -> str:
        if self.schedule:
            return "list %g %s" % (self.jitter, " ".join(str(ms(d)) for d in self.schedule))
        return "exp %d %g %d %g" % (ms(self.base), self.factor, ms(self.cap), self.jitter)


@dataclass(frozen=True)
class Breaker:
    """Circuit breaker of an upstream: opens for ``cooldown`` seconds when, over the last ``window``
    seconds, at least ``min_calls`` attempts ended and ``threshold`` of them failed (retryable
    failures of the task; permanent errors and lost workers do not count). While open, attempts do
    not start: tasks wait in RETRY_WAITING (``policy="park"``, no attempt consumed) or fail at once
    (``policy="fail"``). After the cool-down one probe goes through; its outcome closes or reopens it.
    State is kept per queue (every key of a queue shares one Redis Cluster slot).
    """

    threshold: float = 0.5
    min_calls: int = 10
    window: float = 60.0
    cooldown: float = 30.0
    policy: str = "park"

    def __post_init__(self):
        if not 0 < self.threshold <= 1 or self.min_calls < 1 or self.window <= 0 or self.cooldown <= 0:
            raise ValueError("breaker: threshold in (0, 1], min_calls >= 1, window and cooldown > 0")
        if self.policy not in ("park", "fail"):
            raise ValueError("breaker policy must be 'park' or 'fail'")

    def spec(self, name: str) -> str:
        """The ARGV form read by lua/lib/breaker.lua (breaker_cfg)."""
        return "%d %g %d %d %s" % (ms(self.window), self.threshold, self.min_calls, ms(self.cooldown), name)


def as_backoff(value) -> Backoff:
    if value is None:
        return Backoff()
    if isinstance(value, Backoff):
        return value
    if isinstance(value, (list, tuple)) and value:
        return Backoff.fixed(value)
    raise ValueError("backoff must be a Backoff or a non-empty list of delays in seconds")


@dataclass(frozen=True)
class TaskType:
    """A registered task type. Durations in seconds."""

    name: str
    fn: Callable
    queue: str = "default"
    timeout: float = DEFAULT_TIMEOUT  # whole attempt
    lease: float = 15.0  # heartbeat lease; the worker renews it at a third of this
    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    stages: Mapping[str, float] = field(default_factory=dict)  # stage -> timeout (0 = none)
    permanent_errors: tuple[str, ...] = ()  # error kinds that are never retried
    breaker: Breaker | None = None
    upstream: str = ""  # the breaker's name (types naming one upstream share it); default: the type
    rate: Rate | None = None  # attempt starts allowed per window, shared by the upstream's types
    verify: Callable | None = None  # verify(result, ctx) -> bool: checked before SUCCESS is recorded
    internal: bool = False  # submitted by engine code only (Engine.submit(..., internal=True))

    @property
    def breaker_name(self) -> str:
        return self.upstream or self.name

    @property
    def is_internal(self) -> bool:
        """Internal types (marked so, or named ``ghostless.*``) are refused to ordinary submits."""
        return self.internal or self.name.startswith(INTERNAL_PREFIX)

    @cached_property
    def _signature(self) -> inspect.Signature | None:
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):  # a builtin or C callable: its arguments cannot be checked
            return None

    def bind(self, ctx: Any, args: Mapping[str, Any]) -> inspect.BoundArguments | None:
        """The call ``fn(ctx, **args)`` bound to the function's signature, without calling it.

        Raises BadArgs (a ValueError) naming the parameters that are missing or unknown. None when
        the signature cannot be read (the call then goes ahead unchecked).
        """
        sig = self._signature
        if sig is None:
            return None
        try:
            return sig.bind(ctx, **args)
        except TypeError as e:
            raise BadArgs(self.name, *_mismatch(sig, args), detail=str(e)) from None

    def __post_init__(self):
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"task type name must match {_NAME_RE.pattern}: {self.name!r}")
        if not valid_queue(self.queue):
            raise ValueError(f"queue name must be letters, digits, '_' or '-' (max 64): {self.queue!r}")
        if self.timeout <= 0 or self.lease <= 0:
            raise ValueError("timeout and lease must be positive")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("max_attempts must be an integer >= 1")
        if self.rate is not None and not isinstance(self.rate, Rate):
            object.__setattr__(self, "rate", Rate.parse(self.rate))  # BadRate (a ValueError)
        if self.upstream and not _STAGE_RE.fullmatch(self.upstream):
            raise ValueError(f"upstream name must match {_STAGE_RE.pattern}: {self.upstream!r}")
        for stage, limit in self.stages.items():
            if not _STAGE_RE.fullmatch(stage):
                raise ValueError(f"stage name must match {_STAGE_RE.pattern}: {stage!r}")
            if limit is not None and limit < 0:
                raise ValueError(f"stage {stage!r} timeout must be >= 0")
        # Read now, at registration: a fork worker's parent has it made for every work-horse, which
        # would read it again for its one attempt (about 0.3 ms of a no-op job, measured). Not when
        # an annotation names what its module defines later (Python 3.14 evaluates them here):
        # then at the first bind, as before.
        try:
            self._signature  # noqa: B018
        except NameError:
            pass

    def stage_timeout_ms(self, stage: str) -> int:
        if stage not in self.stages:
            declared = ", ".join(self.stages) or "none"
            raise ValueError(f"task type {self.name!r} declares no stage {stage!r} (declared: {declared})")
        return ms(self.stages[stage] or 0)


def _mismatch(sig: inspect.Signature, args: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(missing, unexpected, accepted) parameter names of ``fn(ctx, **args)``."""
    params = list(sig.parameters.values())[1:]  # the first one receives the context
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params)
    unexpected = [] if open_ended else sorted(set(args) - set(named))
    missing = [p.name for p in params if p.name in named and p.default is p.empty and p.name not in args]
    return missing, unexpected, named


class Registry:
    def __init__(self):
        self._types: dict[str, TaskType] = {}

    def add(self, task_type: TaskType) -> None:
        if task_type.name in self._types:
            raise ValueError(f"task type {task_type.name!r} is already registered")
        check_shared(self._types.values(), task_type)
        self._types[task_type.name] = task_type

    def get(self, name: object) -> TaskType:
        if not isinstance(name, str) or name not in self._types:
            raise UnknownTaskType(str(name))
        return self._types[name]

    def submittable(self, name: object, internal: bool = False) -> TaskType:
        """The type, if callers may submit it: an internal one (TaskType.is_internal) only with
        ``internal=True`` (engine code); to anyone else it is an UnknownTaskType like any other."""
        tt = self.get(name)
        if tt.is_internal and not internal:
            raise UnknownTaskType(str(name))
        return tt

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self):
        return iter(self._types.values())

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._types.values()})

    def queue_timeout(self, queue: str) -> float:
        """The longest attempt timeout of the queue's types: its executor jobs' limit, since a job's
        claim may start any task of the queue (lua/claim.lua; TaskType's default with none)."""
        return max((t.timeout for t in self._types.values() if t.queue == queue), default=DEFAULT_TIMEOUT)
