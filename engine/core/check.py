"""The invariant checker behind Engine.check and ``ghostless check``.

A scan of each queue's index; fine for an operator's check or a test, never
used on a hot path.
"""

from __future__ import annotations

from . import index
from .states import DEADLINE_SET, TERMINAL, State
from .stats import state_counts
from .text import text, text_or_none

SETS = ("dispatch", "leases", "retries", "expiry", "waiting")
LINE = "ready"  # QUEUED tasks only, in the order workers take them
START_BY = "start_by"  # unfinished tasks never started that expire, by their expiry
# The wait lines (lib/record: wait_lines) hold tasks of their state only. A task of that state may
# be missing from its line: one that began to wait before the lines existed.
WAIT_LINES = {"pending_since": State.PENDING.value, "queued_since": State.QUEUED.value}
CHUNK = 500


def check(engine, progress=None) -> list[str]:
    """Violations of every queue; ``progress(queue, n)`` is called as each batch of n tasks is checked."""
    problems: list[str] = []
    for queue in engine.queues():
        problems += _check_queue(engine, queue, progress)
    return problems


def _check_queue(engine, queue: str, progress=None) -> list[str]:
    r, k = engine.redis, engine.keys
    members = {
        name: {text(m): s for m, s in r.zrange(k.queue_key(queue, name), 0, -1, withscores=True)}
        for name in SETS + (LINE, START_BY, *WAIT_LINES)
    }
    ended = _ended_line(r, k.queue_key(queue, "ended"))
    listed_at, problems = index.scan(r, k.queue_index(queue))
    ids = list(listed_at)
    owner_indexes: dict[str, dict[str, float]] = {}  # owner -> its index's tasks, read once
    scanned = {s.value: 0 for s in State}
    unfinished: dict[str, int] = {}  # what the owners hash must hold: 'n:<owner>' and 'b:<owner>'
    seen = set()
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        pipe = r.pipeline(transaction=False)
        for tid in chunk:
            pipe.hmget(
                k.task(tid).task,
                "status",
                "lease_until",
                "attempt_deadline",
                "stage_deadline",
                "token",
                "attempt",
                "owner",
                "waiting_on",
                "expires_at",
                "state_since",
                "created_at",
                "listed_at",
            )
        rows = pipe.execute()
        pipe = r.pipeline(transaction=False)
        for tid in chunk:
            tk = k.task(tid)
            pipe.lindex(tk.body, 0).strlen(tk.args)
        replies = pipe.execute()
        for tid, row, args, legacy_bytes in zip(chunk, rows, replies[::2], replies[1::2]):
            seen.add(tid)
            args_bytes = legacy_bytes if args is None else len(args)  # a task from before the body: its args key
            status, lease_until, attempt_dl, stage_dl, token, attempt, owner, waiting, expires, since, *at = (
                text_or_none(x) for x in row
            )
            when = at[1] or at[0]  # listed_at: where the clock was behind its indexes (lib/record create)
            if when is not None and listed_at[tid] != float(when):
                problems.append(f"{tid}: listed at {listed_at[tid]:.0f} in the queue's index, not at {when}")
            if owner is not None and owner not in owner_indexes:
                owner_indexes[owner], wrong = index.scan(r, k.owner_index(queue, owner))
                problems += wrong
            in_owners = owner is not None and tid in owner_indexes[owner]
            if status is not None and State(status) not in TERMINAL:
                unfinished[f"n:{owner}"] = unfinished.get(f"n:{owner}", 0) + 1
                unfinished[f"b:{owner}"] = unfinished.get(f"b:{owner}", 0) + args_bytes
            if not in_owners and status is not None:
                problems.append(f"{tid}: missing from its owner's ({owner}) task index")
            if status is None:
                problems.append(f"{tid}: in the index but its hash is gone")
                continue
            scanned[status] = scanned.get(status, 0) + 1
            where = [name for name in SETS if tid in members[name]]
            expected = DEADLINE_SET.get(State(status))
            if expected is None:  # terminal: on the ended line at its ending, or (ended before it) in the expiry set
                if "expiry" not in where and int(since or 0) not in ended.get(tid, ()):
                    problems.append(f"{tid}: {status} since {since} but the ended line has no entry of that ending")
                expected = "expiry" if "expiry" in where else None
            if status == State.PENDING.value and waiting == "1":
                expected = "waiting"  # waits on parents, which are themselves covered
            elif waiting == "1" and State(status) not in TERMINAL:
                problems.append(f"{tid}: {status} while still waiting on its parents")
            if where != ([expected] if expected else []):
                problems.append(f"{tid}: {status} is in {where or 'no set'}, expected exactly [{expected or ''}]")
            if (status == State.QUEUED.value) != (tid in members[LINE]):
                problems.append(
                    f"{tid}: {status} {'missing from' if tid not in members[LINE] else 'in'} the ready line"
                )
            # a claim clears expires_at; a terminal task keeps it, out of the set
            expected_by = float(expires) if expires and State(status) not in TERMINAL else None
            if members[START_BY].get(tid) != expected_by:
                problems.append(
                    f"{tid}: {status} with expiry {expires or 'none'} but start_by holds {members[START_BY].get(tid)}"
                )
            for line, state in WAIT_LINES.items():
                if tid in members[line] and (status != state or waiting == "1"):
                    problems.append(f"{tid}: {status} is in the {line} line")
            if status == State.PROCESSING.value:
                parts = [int(lease_until or 0), int(attempt_dl or 0)] + (
                    [int(stage_dl)] if stage_dl and int(stage_dl) else []
                )
                score = members["leases"].get(tid)
                if score is not None and int(score) != min(parts):
                    problems.append(f"{tid}: lease score {int(score)} != deadline {min(parts)}")
            if int(token or 0) < int(attempt or 0) and State(status) not in TERMINAL:
                problems.append(f"{tid}: fencing token {token} below attempt {attempt}")
        if progress is not None:
            progress(queue, len(chunk))
    for name, m in members.items():
        for tid in m.keys() - seen:
            problems.append(f"{tid}: in the {name} set of queue {queue} but not a task of it")
    for tid in ended.keys() - seen:
        problems.append(f"{tid}: on the ended line of queue {queue} but not a task of it")
    held = {text(a): int(b) for a, b in r.hgetall(k.queue_key(queue, "owners")).items()}
    for field in sorted(held.keys() | unfinished.keys()):
        if held.get(field, 0) != unfinished.get(field, 0):
            what = "unfinished tasks" if field.startswith("n:") else "args bytes of unfinished tasks"
            problems.append(
                f"queue {queue}: owner {field[2:]!r} is counted with {held.get(field, 0)} {what} "
                f"but a scan finds {unfinished.get(field, 0)}"
            )
    counts = state_counts(r.hgetall(k.queue_key(queue, "counts")))["counts"]
    for state, n in scanned.items():
        if counts.get(state, 0) != n:
            problems.append(f"queue {queue}: counter {state}={counts.get(state, 0)} but a scan finds {n}")
    return problems


def _ended_line(r, key: str) -> dict[str, set[int]]:
    """Task id -> the ended times of its entries on a queue's ended line (lua/lib/task.lua)."""
    ended: dict[str, set[int]] = {}
    for entry in r.lrange(key, 0, -1):
        tid, at = (text(entry).split(" ") + [""])[:2]
        ended.setdefault(tid, set()).add(int(at) if at.isdigit() else -1)
    return ended
