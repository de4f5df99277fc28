"""Script calls described, not run (sans-IO): what a client call sends to its script and how its
reply reads, shared by the Engine (redis-py) and the AsyncEngine (redis.asyncio).

A ``Plan`` names the script, its KEYS and its ARGV (after the engine config), and ``check``: what
turns the parsed reply into the caller's answer, raising a refusal's exception. The runners are
``Scripts.run`` and ``AsyncScripts.run`` (engine/core/scripts.py, the one place that runs Lua).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .errors import Code, IdempotencyConflict, UnknownParent
from .keys import IndexKeys, TaskKeys, parse_task_id
from .lua_source import call_keys
from .replies import quota_exceeded, refuse


def _same(reply: list) -> Any:
    return reply


class Plan(NamedTuple):
    """One script call: ``check(parsed reply)`` is its answer (or raises its refusal)."""

    name: str
    keys: list[str]
    args: list
    check: Callable[[list], Any] = _same


class SubmitArgs(NamedTuple):
    """submit's ARGV after the engine config (ARGV[5], ARGV[6], ...), in this order: lua/submit.lua
    binds each to a local of the same name (tests/engine/test_scripts_wrappers.py compares them).
    ``parent_ids`` goes last as its count (``n_parents``) then the ids."""

    task_id: str
    type_name: str
    owner: str
    args_json: str
    digest: str  # of type + args: a replayed idempotency key with other args is a conflict
    max_attempts: int
    lease_ms: int
    timeout_ms: int
    priority: int
    delay_ms: int
    backoff: str  # lib/backoff spec
    idempotency_ttl_ms: int
    idempotency_key: str  # '' = none
    queue: str
    due_ms: int  # 0 = no due time
    escalate_ms: int  # 0 = never
    notify_url: str  # '' = none
    quota: str  # lib/quota spec; '' = none
    expires_ms: int  # 0 = never: else it is cancelled (expired) unless started within this
    traceparent: str  # W3C traceparent of the submit's span (engine/core/tracing.py); '' = none
    parent_ids: tuple[str, ...] = ()

    def argv(self) -> list:
        return [*self[:-1], len(self.parent_ids), *self.parent_ids]


def pairs(parents: Sequence[TaskKeys]) -> list[str]:
    """Each parent's hash and children set, as submit and resolve take them."""
    return [k for p in parents for k in (p.task, p.children)]


def flag(value: bool) -> str:
    return "1" if value else "0"


def _refusing(verb: str, task_id: str) -> Callable[[list], list]:
    return lambda reply: refuse(reply, verb, task_id)


def submit(
    keys: TaskKeys,
    owner_index: IndexKeys,
    args: SubmitArgs,
    parents: Sequence[TaskKeys] = (),
    rate_key: str | None = None,
    idem_key: str | None = None,
) -> Plan:
    """``parents``: the keys of ``args.parent_ids``, in order; ``rate_key`` goes with a quota
    (``args.quota``). Its check raises UnknownParent, QuotaExceeded, IdempotencyConflict."""

    def check(reply: list) -> list:
        if reply[0] == Code.UNKNOWN_PARENT:
            raise UnknownParent(reply[1])
        if reply[0] == Code.QUOTA_EXCEEDED:
            raise quota_exceeded(reply, args.task_id)
        if reply[0] == Code.IDEMPOTENCY_CONFLICT:
            raise IdempotencyConflict(args.idempotency_key, reply[1])
        return reply

    extra = [*pairs(parents), *([rate_key] if rate_key else []), *([idem_key] if idem_key else [])]
    return Plan("submit", call_keys("submit", keys, [*owner_index, *extra]), args.argv(), check)


# -- management: owner-checked inside the script --------------------------------------------------
def cancel(keys: TaskKeys, task_id: str, by: str, admin: bool, reason: str) -> Plan:
    return Plan("cancel", call_keys("cancel", keys), [by, flag(admin), reason], _refusing("cancel", task_id))


def edit(
    keys: TaskKeys,
    task_id: str,
    new_keys: TaskKeys,
    owner_index: IndexKeys,
    by: str,
    admin: bool,
    new_id: str,
    args_json: str,
    quota: str = "",
    rate_key: str | None = None,
) -> Plan:
    """``rate_key`` goes with a quota (``quota`` not '')."""
    return Plan(
        "edit",
        [*call_keys("edit", keys), *call_keys("edit", new_keys, [*owner_index, *([rate_key] if rate_key else [])])],
        [by, flag(admin), new_id, args_json, quota],
        _refusing("edit", task_id),
    )


def retry(keys: TaskKeys, task_id: str, by: str, admin: bool, retry_id: str) -> Plan:
    return Plan("retry", call_keys("retry", keys), [by, flag(admin), retry_id], _refusing("retry", task_id))


# -- reads ----------------------------------------------------------------------------------------
def reads(task_keys: dict[str, TaskKeys], owner: str | None, full: bool = False) -> list[tuple[list[str], Plan]]:
    """The read script calls (lua/read.lua) for tasks by id: one per queue, with the ids each reads.
    Each answers ``[hash fields, args, result, place in line]`` per id (with ``full``, then history
    entries and the queue stream's newest id), or ``[]`` for a missing task or one not ``owner``'s
    (None: anyone's), whose args, result and history are never read."""
    by_queue: dict[str | None, list[str]] = {}
    for task_id in task_keys:
        by_queue.setdefault(parse_task_id(task_id), []).append(task_id)
    head = ["1" if owner is None else "0", owner or "", "1" if full else "0"]
    return [
        (
            ids,
            Plan(
                "read",
                [k for i in ids for k in call_keys("read", task_keys[i])],
                [*head, *ids],
                lambda reply: reply[1:],
            ),
        )
        for ids in by_queue.values()
    ]


def read_replies(calls: list[tuple[list[str], Plan]], replies: Sequence[list]) -> dict[str, list]:
    """The parsed replies of ``reads`` calls, in order, as {task id: entry}."""
    out: dict[str, list] = {}
    for (ids, plan), reply in zip(calls, replies):
        out.update(zip(ids, plan.check(reply)))
    return out
