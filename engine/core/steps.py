"""The client calls written once, without IO: each is a generator that yields the steps it needs
done and is sent back their answers, so one body serves the Engine (redis-py, run here as plain
calls) and the AsyncEngine (redis.asyncio, awaited: engine/core/aio.py).

The steps:

- a ``Plan`` (engine/core/plans.py): one script call; answered with its checked reply.
- ``Command(name, args, kwargs)``: one Redis command, by its client method's name.
- ``Commands(commands)``: several, sent in one pipeline (not a transaction: other clients' commands
  may come between them, never reorder them); answered with their replies, in order.
- ``ReadTasks(task_keys, owner, full)``: the read script per queue (``Scripts.read``).
- ``Events(key, queue, task_id, position, block_ms)``: block up to ``block_ms`` for the queue
  stream's events after ``position``; answered with (new position, whether the task's terminal
  transition was among them). The Engine sends its own XREAD; the AsyncEngine's waiters share one
  reader per stream (engine/core/aio_watch.py).
- ``Blocking(fn, args)``: a call of the sync Engine that has no asyncio form: the RQ enqueue of a
  dispatch (RQ is sync redis-py), the resolution of waiting children, the first use of a queue.
  The Engine calls it; the AsyncEngine runs it in a worker thread (``asyncio.to_thread``).
- ``CLIENT``: the Redis client the call runs on (a wait reads its socket timeout).

A step's exception ends the call. ``sync_call(op)`` and ``async_call(op)`` make a call a method
of each engine, with the call's own signature and docstring.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
Call = Generator[Any, Any, R]


class Command(NamedTuple):
    name: str
    args: tuple = ()
    kwargs: dict = {}  # noqa: RUF012 - never mutated: keyword arguments of one command


class Commands(NamedTuple):
    commands: tuple[Command, ...]

    def queued(self, pipe: Any) -> Any:
        """``pipe`` (a redis-py pipeline, sync or async) with these commands queued on it."""
        for c in self.commands:
            getattr(pipe, c.name)(*c.args, **c.kwargs)
        return pipe


class ReadTasks(NamedTuple):
    task_keys: dict
    owner: str | None
    full: bool = False


class Events(NamedTuple):
    key: str
    queue: str
    task_id: str
    position: str
    block_ms: int


class Blocking(NamedTuple):
    fn: Callable
    args: tuple = ()


CLIENT = "client"


def drive(call: Call[R], do: Callable[[Any], Any]) -> R:
    """Run a call, each step by ``do`` (the Engine's)."""
    answer = None
    try:
        while True:
            answer = do(call.send(answer))
    except StopIteration as stop:
        return stop.value


async def drive_async(call: Call[R], do: Callable[[Any], Coroutine[Any, Any, Any]]) -> R:
    """Run a call, each step awaited by ``do`` (the AsyncEngine's)."""
    answer = None
    try:
        while True:
            answer = await do(call.send(answer))
    except StopIteration as stop:
        return stop.value


def sync_call(op: Callable[Concatenate[Any, P], Call[R]]) -> Callable[Concatenate[Any, P], R]:
    """``op`` (a call taking the engine first) as an Engine method."""

    @functools.wraps(op)
    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return drive(op(self, *args, **kwargs), self._do)

    return _answering(method, op)


def async_call(op: Callable[Concatenate[Any, P], Call[R]]) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """``op`` as an AsyncEngine method: run on the AsyncEngine's client, with the registry, keys
    and config of the Engine it was made from (``self.engine``)."""

    @functools.wraps(op)
    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await drive_async(op(self.engine, *args, **kwargs), self._do)

    return _answering(method, op)


def _answering(method: Callable[..., Any], op: Callable[..., Any]) -> Any:
    """``method`` with the signature ``help()`` shows: ``op``'s, answering what its call returns
    (``Call[Task]`` -> ``Task``)."""
    sig = inspect.signature(op)
    answer = sig.return_annotation
    if isinstance(answer, str) and answer.startswith("Call[") and answer.endswith("]"):
        answer = answer[len("Call[") : -1]
    method.__signature__ = sig.replace(return_annotation=answer)  # type: ignore[attr-defined]
    return method
