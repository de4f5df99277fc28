"""A script's reply as Python: decoded, its code a ``Code``, and a refusal as its exception
(engine/core/errors.py). engine/core/scripts.py's wrappers read every reply through here."""

from __future__ import annotations

from .errors import (
    AttemptEnded,
    Code,
    IdempotencyConflict,
    IllegalTransition,
    LeaseLost,
    QuotaExceeded,
    TaskCancelled,
    TaskNotFound,
)
from .keys import parse_task_id
from .text import decoded

RESOLVE_MARK = "!resolve"  # lua/lib/record.lua: finish()


def parse(reply) -> list:
    """A script's reply, decoded, with its code as a Code (a trailing RESOLVE_MARK is kept)."""
    reply = decoded(reply)
    reply[0] = Code(reply[0])
    return reply


def quota_exceeded(reply: list, task_id: str) -> QuotaExceeded:
    """lib/quota's refusal {QUOTA_EXCEEDED, limit, ms to wait (0: until tasks end), owner}."""
    wait_ms = int(reply[2])
    return QuotaExceeded(reply[3], parse_task_id(task_id) or "", reply[1], wait_ms / 1000 if wait_ms else None)


def refuse(reply: list, verb: str, task_id: str, token: int | None = None) -> list:
    """Turn a refusal into its exception; return a success reply unchanged."""
    code = reply[0]
    if code >= 0:
        return reply
    if code == Code.NOT_FOUND:
        raise TaskNotFound(task_id)
    if code == Code.ILLEGAL_TRANSITION:
        raise IllegalTransition(task_id, reply[1], verb)
    if code == Code.CANCELLED:
        raise TaskCancelled(task_id, token)
    if code == Code.LEASE_LOST:
        raise LeaseLost(task_id, token, reply[1])
    if code == Code.ATTEMPT_ENDED:
        raise AttemptEnded(task_id, token, reply[1])
    if code == Code.IDEMPOTENCY_CONFLICT:
        raise IdempotencyConflict("", reply[1])
    if code == Code.QUOTA_EXCEEDED:
        raise quota_exceeded(reply, task_id)
    raise AssertionError(f"unexpected reply {reply!r} from {verb}")  # a script/wrapper mismatch
