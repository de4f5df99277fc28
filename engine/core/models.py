"""What the engine hands back: Task, Lease and Event, parsed from Redis replies.

Times are seconds since the epoch (floats), read from Redis server time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .states import State, implied
from .text import int_or_text, text


def _t(v) -> float | None:
    v = text(v)
    return int(v) / 1000 if v not in ("", "0") else None


def _i(v, default: int = 0) -> int:
    v = text(v)
    return int(v) if v else default


@dataclass
class Task:
    id: str
    type: str
    queue: str
    owner: str
    status: State
    stage: str = ""
    progress: float = 0.0
    message: str = ""
    attempt: int = 0
    max_attempts: int = 1
    args: Any = None
    result: Any = None
    error_kind: str = ""
    reason: str = ""
    created_at: float | None = None
    updated_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    next_retry_at: float | None = None
    worker: str = ""
    supersedes: str = ""
    superseded_by: str = ""
    version: int = 0
    priority: int = 0
    idempotency_key: str = ""
    token: int = 0
    lease_deadline: float | None = None
    queued_at: float | None = None  # while QUEUED: when it last entered QUEUED from PENDING
    due_at: float | None = None  # by when it should have ended (submit's due_in)
    escalate_at: float | None = None
    overdue_at: float | None = None  # when the sweeper recorded it overdue (once)
    escalated_at: float | None = None
    #: by when it must start, else it ends CANCELLED (expired); None once started, or never
    expires_at: float | None = None
    #: QUEUED only: how many tasks of its queue start before it (0 = next); O(log N) to read
    position: int | None = None
    #: set by submit: True when an idempotency key (or a resent call) returned an existing task
    replayed: bool = False
    parents: list = field(default_factory=list)  # ids it waits on (submit's depends_on)
    waiting: bool = False  # PENDING until every parent is SUCCESS
    notify_url: str = ""

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @classmethod
    def from_redis(cls, h: dict, args_json, result_json, task_id: str | None = None) -> Task:
        """``task_id``: the task's, which its hash holds only when written before it was implied."""
        g = {text(k): text(v) for k, v in h.items()}
        g.setdefault("id", task_id or "")
        g.setdefault("queue", g["id"].split(".", 1)[0])
        lease = None
        if g.get("status") == "PROCESSING":
            parts = [int(g[k]) for k in ("lease_until", "attempt_deadline", "stage_deadline") if g.get(k, "0") != "0"]
            lease = min(parts) / 1000 if parts else None
        return cls(
            id=g["id"],
            type=g["type"],
            queue=g["queue"],
            owner=g["owner"],
            status=State(g["status"]),
            stage=g.get("stage", ""),
            progress=float(g.get("progress") or (1 if g.get("status") == "SUCCESS" else 0)),  # implied by SUCCESS
            message=g.get("message", ""),
            attempt=_i(g.get("attempt")),
            max_attempts=_i(g.get("max_attempts"), 1),
            args=json.loads(args_json) if args_json else None,
            result=json.loads(result_json) if result_json else None,
            error_kind=g.get("error_kind", ""),
            reason=g.get("reason", ""),
            created_at=_t(g.get("created_at")),
            updated_at=_t(g.get("updated_at") or g.get("state_since")),  # stored only when a touch moved it
            started_at=_t(g.get("started_at")),
            finished_at=_t(g.get("state_since")) if State(g["status"]).terminal else None,  # when it ended
            next_retry_at=_t(g.get("next_retry_at")),
            worker=g.get("worker", ""),
            supersedes=g.get("supersedes", ""),
            superseded_by=g.get("superseded_by", ""),
            version=_i(g.get("version")),
            priority=_i(g.get("priority")),
            idempotency_key=g.get("idempotency_key", ""),
            token=_i(g.get("token")),
            lease_deadline=lease,
            parents=[p for p in g.get("parents", "").split(",") if p],
            notify_url=g.get("notify_url", ""),
            waiting=g.get("waiting_on") == "1",
            queued_at=_t(g.get("queued_at")),
            due_at=_t(g.get("due_at")),
            escalate_at=_t(g.get("escalate_at")),
            overdue_at=_t(g.get("overdue_at")),
            escalated_at=_t(g.get("escalated_at")),
            expires_at=_t(g.get("expires_at")),
        )

    @classmethod
    def from_reply(cls, entry: list, task_id: str) -> Task:
        """Task ``task_id`` from its lua/read.lua entry: [hash fields as a flat list, args, result,
        place in line, ...]."""
        flat, args, result, position = entry[:4]
        task = cls.from_redis(dict(zip(flat[::2], flat[1::2])), args, result, task_id)
        task.position = position
        return task

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["status"] = self.status.value
        return d


@dataclass(frozen=True)
class Lease:
    """Proof of holding a task's lease. Every lease-holder call carries it.

    The fence is the pair (``token``, ``claim_id``): ``token`` orders the task's attempts (each
    claim takes a higher one), ``claim_id`` (random, one per claim) tells apart two claims that
    issued the same token on different timelines, as after a failover that lost a claim. A call
    whose pair is not the latest claim's is refused (LeaseLost)."""

    task_id: str
    token: int
    attempt: int
    args: Any
    type: str
    worker: str
    lease: float  # seconds
    max_attempts: int = 1
    #: the claim that took this lease (lua/claim.lua stores it; every holder call checks it)
    claim_id: str = ""
    #: checkpoints saved by earlier attempts, as the claim found them (name -> JSON value)
    checkpoints: dict = field(default_factory=dict, compare=False)
    #: the task the claim passed over to take this one, the head of the queue's line (lua/claim.lua)
    passed_over: str | None = field(default=None, compare=False)
    #: the traceparent its submit stored, as the claim found it ('' none; None: not read)
    traceparent: str | None = field(default=None, compare=False)


#: A history entry as stored (lua/lib/record.lua ``emit``; the Lua tables are generated from these by
#: engine/core/lua_source.py): the fields of HISTORY_LAYOUT by position, then any other field as
#: ``<short name>=<value>``, all joined by ``|``, with a backslash before each ``|`` or backslash in a value.
#: A transition's kind is ''; its from (to) is left out when its verb has one source (target) state
#: alone (states.py ``implied``: complete is PROCESSING -> SUCCESS); trailing empty fields are left
#: out when no other field follows. E.g. ``1796446595850||claim|PENDING||1|w1||n=1``. Entries
#: written before as JSON objects, under the short names (0.7) or the long ones, read the same.
HISTORY_LAYOUT = ("at", "kind", "verb", "from", "to", "attempt", "worker", "stage")
HISTORY_NAMES = {
    "at": "t", "kind": "k", "verb": "v", "from": "f", "to": "s", "stage": "g", "from_stage": "p",
    "attempt": "a", "worker": "w", "reason": "r", "by": "b", "token": "n", "error_kind": "e",
}  # fmt: skip
_LONG_NAMES = {short: long for long, short in HISTORY_NAMES.items()}
assert len(_LONG_NAMES) == len(HISTORY_NAMES) and not set(_LONG_NAMES) & set(HISTORY_NAMES)
#: Entries a task's history (not its stream) writes without their worker when it is the worker its
#: attempt's claim entry names (lua/lib/record.lua ``emit``): stage entries, and the transitions of
#: these verbs. ``history_entries`` reads the worker back from that claim entry.
OF_CLAIM = ("stage", "complete", "fail", "release", "expire")
_NUMBERS = ("at", "attempt", "token")  # read back as the numbers they were written as
#: Stored data once written: an entry that left a state out is read back with these (a test pins them).
IMPLIED = {"from": implied("from"), "to": implied("to")}


def _split_entry(raw: str) -> list[str]:
    """The fields of a stored entry: split at each ``|`` that no backslash escapes, unescaped."""
    fields, current, chars = [], [], iter(raw)
    for c in chars:
        if c == "\\":
            current.append(next(chars, ""))
        elif c == "|":
            fields.append("".join(current))
            current = []
        else:
            current.append(c)
    fields.append("".join(current))
    return fields


def history_entry(raw) -> dict:
    """A stored history entry with its long field names (``kind`` included)."""
    raw = text(raw)
    if raw.startswith("{"):  # as written before the compact entries
        d = {_LONG_NAMES.get(k, k): v for k, v in json.loads(raw).items()}
    else:
        fields = _split_entry(raw)
        d = {name: v for name, v in zip(HISTORY_LAYOUT, fields) if v != ""}
        for extra in fields[len(HISTORY_LAYOUT) :]:
            short, _, v = extra.partition("=")
            d[_LONG_NAMES.get(short, short)] = v
        if "kind" not in d:  # a transition: what its verb implies
            for name, by_verb in IMPLIED.items():
                if name not in d and d.get("verb") in by_verb:
                    d[name] = by_verb[d["verb"]]
    for name in _NUMBERS:  # a stale entry's token was a string in JSON too
        if name in d:
            d[name] = int_or_text(d[name])
    d.setdefault("kind", "transition")
    return d


def history_entries(raws, attempt: int | None = None, worker: str = "", created_ms: int | None = None) -> list[dict]:
    """A task's stored history entries, oldest first (``history_entry`` each), with the two fields
    a stored entry may leave to others (lua/lib/record.lua ``emit``) filled in: the worker of an
    OF_CLAIM entry is that of its attempt's claim entry, and a time stored as ``+<ms>`` counts from
    the task's creation, the time of its submit entry. When a long history was trimmed past those
    entries, the task's own ``attempt``, ``worker`` and ``created_ms`` stand in (when the caller has
    them); without them such a field stays as stored (``resolved`` says so)."""
    claimed: dict[Any, str] = {attempt: worker} if attempt is not None and worker else {}
    created = created_ms
    out = []
    for raw in raws:
        d = history_entry(raw)
        what = _what(d)
        at = d.get("at")
        if isinstance(at, str) and at.startswith("+"):
            if created is not None:
                d["at"] = created + int(at[1:])
        elif what == "submit" and created is None:
            created = at
        if what == "claim" and "worker" in d:
            claimed[d.get("attempt")] = d["worker"]
        elif what in OF_CLAIM and "worker" not in d and d.get("attempt") in claimed:
            d["worker"] = claimed[d.get("attempt")]
        out.append(d)
    return out


def resolved(entries: list[dict]) -> bool:
    """Whether ``history_entries`` filled in every field its entries left to others."""
    return not any(isinstance(d.get("at"), str) or (_what(d) in OF_CLAIM and "worker" not in d) for d in entries)


def _what(d: dict) -> str | None:
    """A transition's verb, or another entry's kind (as OF_CLAIM names them)."""
    return d.get("verb") if d["kind"] == "transition" else d["kind"]


@dataclass
class Event:
    """One entry of a task's history (oldest first from Engine.history)."""

    kind: str  # transition | stage | stale
    at: float
    from_: str = ""
    to: str = ""
    stage: str = ""
    attempt: int = 0
    worker: str = ""
    reason: str = ""
    by: str = ""
    verb: str = ""
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_entry(cls, d: dict) -> Event:
        """The event of an entry of ``history_entries``."""
        known = {"kind", "at", "from", "to", "stage", "attempt", "worker", "reason", "by", "verb"}
        return cls(
            kind=d.get("kind", ""),
            at=int(d.get("at", 0)) / 1000,
            from_=d.get("from", ""),
            to=d.get("to", ""),
            stage=d.get("stage", ""),
            attempt=int(d.get("attempt", 0) or 0),
            worker=d.get("worker", ""),
            reason=d.get("reason", ""),
            by=d.get("by", ""),
            verb=d.get("verb", ""),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("from_", "extra")}
        d["from"] = self.from_
        d.update(self.extra)
        return d
