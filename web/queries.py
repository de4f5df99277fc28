"""Read-only queries the web app needs beyond the Engine API: snapshots with their stream
position, stream reads, stuck tasks, throughput, workers, readiness, token digests.

Nothing here changes a task: every write goes through the scripts (engine/core/engine.py).
"""
from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator

from ghostless.core.keys import parse_task_id
from ghostless.core.models import Event, Task
from ghostless.core.scripts import SCRIPTS, source
from ghostless.core.states import State

log = logging.getLogger("ghostless.web")

STREAM_ID_RE = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
MAX_SEQ = (1 << 64) - 1
TERMINAL_VALUES = frozenset(s.value for s in State if s.terminal)
_INT_FIELDS = ("version", "attempt", "token")


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))


def parse_stream_id(value: object) -> tuple[int, int] | None:
    """``"<ms>-<seq>"`` as a comparable pair, or None when malformed."""
    m = STREAM_ID_RE.fullmatch(value) if isinstance(value, str) else None
    if not m or int(m.group(1)) >= 1 << 64 or int(m.group(2)) >= 1 << 64:
        return None
    return int(m.group(1)), int(m.group(2))


def server_ms(redis) -> int:
    sec, usec = redis.time()
    return int(sec) * 1000 + int(usec) // 1000


# -- events on the queue streams --------------------------------------------------------------------
def stream_event(queue: str, stream_id, fields: dict) -> dict:
    """A stream entry (lua/lib/record.lua ``emit``) as the JSON the web sends."""
    f = {_s(k): _s(v) for k, v in fields.items()}
    ev = {"stream_id": _s(stream_id), "queue": queue, "task_id": f.pop("id", ""), "kind": f.pop("kind", ""),
          "owner": f.pop("owner", ""), "type": f.pop("type", ""),
          "at": int(f.pop("at", "0") or 0) / 1000, "from": f.pop("from", ""), "to": f.pop("to", "")}
    for name in _INT_FIELDS:
        if name in f:
            raw = f.pop(name)
            ev[name] = int(raw) if raw.lstrip("-").isdigit() else raw
    if "progress" in f:
        try:
            ev["progress"] = float(f.pop("progress"))
        except ValueError:
            pass
    ev.update(f)
    return ev


def is_terminal(ev: dict) -> bool:
    return ev.get("kind") == "transition" and ev.get("to") in TERMINAL_VALUES


def read_stream(engine, queue: str, start: str, end: str = "+", batch: int = 500) -> Iterator[dict]:
    """Events of a queue's stream from ``start`` (``(id``: after id) to ``end``, in order."""
    key = engine.keys.queue_key(queue, "events")
    if start.startswith("("):  # as the next id, inclusive: no error after the largest id, any Redis
        ms, seq = parse_stream_id(start[1:])
        if seq < MAX_SEQ:
            start = f"{ms}-{seq + 1}"
        elif ms < MAX_SEQ:
            start = f"{ms + 1}-0"
        else:
            return
    while True:
        rows = engine.redis.xrange(key, start, end, count=batch)
        for sid, fields in rows:
            yield stream_event(queue, sid, fields)
        if len(rows) < batch:
            return
        start = "(" + _s(rows[-1][0])


def stream_may_be_trimmed(engine, queue: str, after: str) -> bool:
    """True when events after ``after`` may have been trimmed away (the stream is at its cap
    and its oldest entry is newer than ``after``)."""
    key = engine.keys.queue_key(queue, "events")
    if engine.redis.xlen(key) < engine.config.stream_maxlen:
        return False
    first = engine.redis.xrange(key, "-", "+", count=1)
    return bool(first) and parse_stream_id(_s(first[0][0])) > parse_stream_id(after)


def snapshot(engine, task_id: str, owner: str | None = None):
    """(task or None, history, stream id of the queue's newest event) read atomically, so that
    every event after that id is newer than the snapshot. None for another owner's task than
    ``owner`` (None: anyone's), found without reading its args, result or history; read-only, so
    it works on a Redis at maxmemory (engine/core/scripts.py ``read``)."""
    if parse_task_id(task_id) is None:
        return None, [], "0-0"
    entry = engine.scripts.read({task_id: engine.keys.task(task_id)}, owner, full=True)[task_id]
    if not entry:
        return None, [], "0-0"
    return Task.from_reply(entry), [Event.from_json(e) for e in entry[4]], entry[5]


# -- users ----------------------------------------------------------------------------------------
def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def user_for_digest(engine, digest: object):
    """The user owning the token with this SHA-256 digest (None once the token is revoked)."""
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        return None
    return engine.users.for_digest(digest)


def stuck_tasks(engine, queued_after: float, owner: str | None = None, limit: int = 100) -> list[dict]:
    """PROCESSING tasks past their lease deadline (the sweeper has not reclaimed them) and
    PENDING/QUEUED tasks waiting longer than ``queued_after`` seconds. Reads only what is due."""
    now = server_ms(engine.redis)
    requeue_ms = int(engine.config.requeue_after * 1000)
    out = []
    for queue in engine.queues():
        # A QUEUED task's dispatch deadline is dispatched_at + requeue_after: the oldest come first.
        for key, until in ((engine.keys.queue_key(queue, "leases"), now),
                           (engine.keys.queue_key(queue, "dispatch"), now - queued_after * 1000 + requeue_ms)):
            out += _stuck_in(engine, key, until, now, queued_after, owner, limit)
    out.sort(key=lambda s: -s["for_seconds"])
    return out[:limit]


def _stuck_in(engine, key: str, until: float, now: int, queued_after: float, owner: str | None,
              limit: int) -> list[dict]:
    """Up to ``limit`` of ``owner``'s stuck tasks among one deadline set's due entries, read a
    batch at a time: other owners' tasks first in line must not hide the caller's."""
    out, offset = [], 0
    while len(out) < limit:
        ids = [_s(i) for i in engine.redis.zrangebyscore(key, "-inf", until, offset, limit)]
        for task in engine.get_many(ids, owner=owner):
            if task is None:
                continue
            if task.status == State.PROCESSING and task.lease_deadline and task.lease_deadline * 1000 < now:
                out.append(_stuck(task, "lease_expired", now / 1000 - task.lease_deadline))
            elif task.status in (State.PENDING, State.QUEUED) and task.updated_at \
                    and now / 1000 - task.updated_at >= queued_after:
                out.append(_stuck(task, f"{task.status.value.lower()}_too_long", now / 1000 - task.updated_at))
        if len(ids) < limit:
            return out
        offset += limit
    return out


def _stuck(task: Task, why: str, seconds: float) -> dict:
    return {"task_id": task.id, "queue": task.queue, "type": task.type, "owner": task.owner,
            "status": task.status.value, "stage": task.stage, "why": why, "for_seconds": round(seconds, 3)}


def throughput(engine, minutes: int = 5) -> dict:
    """Tasks that reached each terminal state per minute, over the last ``minutes`` whole minutes
    and the current one, read from the queue streams (capped, so a busy queue may show less)."""
    now = server_ms(engine.redis)
    first = (now // 60000 - minutes) * 60000
    buckets = [first + i * 60000 for i in range(minutes + 1)]
    out = {}
    for queue in engine.queues():
        rows = {b: dict.fromkeys(sorted(TERMINAL_VALUES), 0) for b in buckets}
        for ev in read_stream(engine, queue, str(first), f"{now}-{MAX_SEQ}"):  # not past `now`: no bucket
            if is_terminal(ev):
                rows[int(ev["at"] * 1000) // 60000 * 60000][ev["to"]] += 1
        out[queue] = [{"minute": b / 1000, **rows[b]} for b in buckets]
    return out


def workers(engine) -> list[dict]:
    """The executor's workers serving this namespace (RQ's registry, read by the execution layer)."""
    return engine.dispatcher.workers()


def script_shas() -> dict[str, str]:
    """SHA1 of each script as the loader sends it (what EVALSHA names)."""
    return {name: hashlib.sha1(source(name).encode()).hexdigest() for name in SCRIPTS}


def ensure_scripts(engine) -> list[str]:
    """Check the engine's scripts are in Redis's script cache; load those missing (after a
    restart or SCRIPT FLUSH). Returns the names it loaded. Raises redis errors."""
    shas = script_shas()
    present = engine.redis.script_exists(*shas.values())
    missing = [name for name, ok in zip(shas, present) if not ok]
    for name in missing:
        if engine.redis.script_load(source(name)) != shas[name]:
            raise RuntimeError(f"script {name} loaded under an unexpected sha")
    return missing

