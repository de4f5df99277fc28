"""What the contract tests share: snapshots of every key a script may write (to compare before
and after a call), engines sharing a test's Redis, and ready-made lease holders."""

from __future__ import annotations

import copy

from ghostless import Config, Engine, Lease, State
from ghostless.core import index
from ghostless.core.keys import BODY_HISTORY
from tests.conftest import register_test_types
from tests.support.wait import wait_for_server_time

DEADLINE_SETS = ("dispatch", "leases", "retries", "expiry")
GHOST = "images.0123456789abcdef0123"  # a well-formed task id no test creates


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def raw_task(engine: Engine, task_id: str) -> dict[str, str]:
    """The task hash as stored (strings), {} when it is gone."""
    return {_s(k): _s(v) for k, v in engine.redis.hgetall(engine.keys.task(task_id).task).items()}


def task_snapshot(engine: Engine, task_id: str) -> dict:
    """Every key of one task, and its score in each deadline set and the index."""
    k, r = engine.keys.task(task_id), engine.redis
    body = [_s(v) for v in r.lrange(k.body, 0, -1)]  # [] for a task from before the body: its own keys
    return {
        "hash": raw_task(engine, task_id),
        "args": body[0] if body else _s(r.get(k.args)),
        "result": (body[1] or None) if body else _s(r.get(k.result)),
        "history": body[BODY_HISTORY:] if body else [_s(h) for h in r.lrange(k.history, 0, -1)],
        "checkpoints": {_s(a): _s(b) for a, b in r.hgetall(k.checkpoints).items()},
        "sets": {name: r.zscore(getattr(k, name), task_id) for name in DEADLINE_SETS}
        | {"index": index_score(engine, task_id)},
        "ended": ended_entries(engine, task_id),
    }


def index_score(engine: Engine, task_id: str) -> float | None:
    """The task's score in its queue's index, in whichever page holds it (engine/core/index.py)."""
    head = engine.keys.task(task_id).index
    scores = (engine.redis.zscore(key, task_id) for key in index.keys_of(engine.redis, head))
    return next((s for s in scores if s is not None), None)


def ended_entries(engine: Engine, task_id: str) -> list[str]:
    """The task's entries on its queue's ended line, oldest first ('<id> <ended ms>[ <kept until>]')."""
    line = engine.redis.lrange(engine.keys.task(task_id).ended, 0, -1)
    return [e for e in map(_s, line) if e.split(" ")[0] == task_id]


def ended_at(engine: Engine, task_id: str) -> int | None:
    """When the task's latest ending on the ended line was (ms), None when it has none."""
    entries = ended_entries(engine, task_id)
    return int(entries[-1].split(" ")[1]) if entries else None


def purge_due_ms(engine: Engine, task_id: str) -> int:
    """When ``engine``'s sweeper may purge the task (ms): its latest entry's kept-until, else its end
    plus that engine's retention."""
    *_, last = ended_entries(engine, task_id)
    parts = last.split(" ")
    return int(parts[2]) if len(parts) > 2 else int(parts[1]) + int(engine.config.retention * 1000)


#: The statistic a repeated call writes of itself (lua/lib/record.lua replay): a snapshot leaves it
#: out, so that a repeat compares equal to the call it repeats; tests/engine/test_replay.py counts it.
REPLAYED_STAT = "replayed"


def queue_snapshot(engine: Engine, queue: str) -> dict:
    """A queue's counters, statistics (but the count of repeated calls) and event stream length."""
    r, q = engine.redis, engine.keys
    stats = {_s(a): int(b) for a, b in r.hgetall(q.queue_key(queue, "stats")).items()}
    stats.pop(REPLAYED_STAT, None)
    return {
        "counts": {_s(a): int(b) for a, b in r.hgetall(q.queue_key(queue, "counts")).items()},
        "stats": stats,
        "events": r.xlen(q.queue_key(queue, "events")),
    }


def snapshot(engine: Engine, *task_ids: str) -> dict:
    """Everything a script on these tasks may write: the tasks' keys and their queues' keys."""
    queues = sorted({tid.split(".")[0] for tid in task_ids})
    return {
        "tasks": {tid: task_snapshot(engine, tid) for tid in task_ids},
        "queues": {q: queue_snapshot(engine, q) for q in queues},
    }


def stale_rejections(engine: Engine, queue: str = "images") -> int:
    return engine.stats()[queue]["stale_rejections"]


def sibling(engine: Engine, config: Config | None = None, dispatcher=None, types: bool = True) -> Engine:
    """Another engine on the same Redis and namespace (own config, dispatcher, registry)."""
    other = Engine(engine.redis, namespace=engine.keys.ns, config=config, dispatcher=dispatcher)
    return register_test_types(other) if types else other


def ghost_lease(task_id: str = GHOST, token: int = 1, type: str = "render") -> Lease:
    """A lease on a well-formed task id that no task has."""
    return Lease(task_id=task_id, token=token, attempt=1, args={}, type=type, worker="w1", lease=30.0, max_attempts=3)


#: Each lease-holder call with valid arguments for the ``render`` type.
HOLDER_CALLS = {
    "heartbeat": lambda e, lease: e.heartbeat(lease),
    "stage": lambda e, lease: e.stage(lease, "generating"),
    "progress": lambda e, lease: e.progress(lease, 0.5, "half way"),
    "checkpoint": lambda e, lease: e.checkpoint(lease, "page", {"n": 3}),
    "complete": lambda e, lease: e.complete(lease, {"url": "s3://x"}),
    "fail": lambda e, lease: e.fail(lease, "boom", "it broke"),
    "release": lambda e, lease: e.release(lease),
}


def in_state(engine: Engine, state: State, owner: str = "alice", type: str = "render"):
    """A task of ``owner`` in ``state``, made through the engine, and its last lease (None when
    it had none). TIMEOUT uses the ``brief`` type, whose attempt times out."""
    task = engine.submit(
        "brief" if state == State.TIMEOUT else type, {} if state == State.TIMEOUT else {"prompt": "a cat"}, owner=owner
    )
    if state == State.PENDING:
        return task, None
    lease = engine.claim(task.id, "w1")
    if state == State.SUCCESS:
        engine.complete(lease, {"url": "s3://cat"})
    elif state == State.FAILED:
        engine.fail(lease, "boom", "it broke", retryable=False)
    elif state == State.RETRY_WAITING:
        engine.fail(lease, "boom", "flaky")
    elif state == State.TIMEOUT:
        wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
        assert engine.sweep().timed_out == 1
    elif state == State.CANCELLED:
        engine.cancel(task.id, by=owner)
    assert engine.get(task.id).status == state
    return task, lease


def claimed(engine: Engine, type: str = "render"):
    """A task of alice claimed by worker w1: (task, lease)."""
    task = engine.submit(type, {"prompt": "a cat"}, owner="alice")
    return task, engine.claim(task.id, "w1")


def reclaimed(engine: Engine, type: str = "render"):
    """A task claimed by w1, released, and claimed again by w2: w1's lease (token 1) is stale.

    Returns (task, stale lease, current lease).
    """
    task = engine.submit(type, {"prompt": "p"}, owner="alice")
    stale = engine.claim(task.id, "w1")
    engine.release(stale, "shutdown")
    current = engine.claim(task.id, "w2")
    assert (stale.token, current.token) == (1, 2)
    return task, stale, current


def assert_only_stale_recorded(engine: Engine, before: dict, task_id: str, verb: str, token: int) -> None:
    """After a refused call: one 'stale' history entry, one stale rejection and one stream event
    more than ``before``; every other key of the task and its queue exactly as it was."""
    queue = task_id.split(".")[0]
    before, after = copy.deepcopy(before), snapshot(engine, task_id)
    event = engine.history(task_id)[-1]
    assert (event.kind, event.verb, str(event.extra["token"])) == ("stale", verb, str(token))
    rejected_before = before["queues"][queue]["stats"].pop("stale_rejections", 0)
    assert stale_rejections(engine, queue) == rejected_before + 1
    # Take out what a refusal may add; the rest must be untouched.
    after["tasks"][task_id]["history"].pop()
    after["queues"][queue]["stats"].pop("stale_rejections")
    assert after["queues"][queue]["events"] == before["queues"][queue]["events"] + 1
    after["queues"][queue]["events"] = before["queues"][queue]["events"]
    assert after == before
