"""What a task's history leaves to its other entries (lua/lib/record.lua ``emit``), and every reader
(Engine.history, the task page's snapshot) reads back: an attempt's worker is named once, in its
claim entry (stage, complete, fail, release and expire entries by that worker leave it out; a
worker's default name has 16 characters, RQ's own ``uuid4().hex`` 32), and an entry's time counts from
the task's creation, its submit entry's time (``+<ms>``, 13 digits fewer). The queue's stream keeps the
worker in every event (a watcher reads one event alone) and its time is its entry id's
(tests/engine/test_streams.py)."""

import dataclasses

import pytest

from ghostless import Config, LeaseLost
from ghostless.core.keys import BODY_HISTORY
from ghostless.core.streams import read_stream
from ghostless.web.queries import snapshot
from tests.support.snapshots import reclaimed, sibling

WORKER = "3f9c2a7be61d4c08a5e4b1d27c90f6e3"  # as long as RQ's default worker names


def stored(engine, task_id) -> list[str]:
    return [e.decode() for e in engine.redis.lrange(engine.keys.task(task_id).body, BODY_HISTORY, -1)]


def streamed(engine, task_id) -> list[str]:
    events = engine.redis.xrange(engine.keys.task(task_id).events)
    return [f[b"e"].decode() for _, f in events if f[b"id"] == task_id.encode()]


def workers(events) -> list[tuple]:
    return [(e.kind, e.verb, e.attempt, e.worker) for e in events]


def test_an_attempts_entries_name_its_worker_once_and_every_reader_names_it(engine):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    lease = engine.claim(task.id, WORKER)
    engine.stage(lease, "generating")
    engine.stage(lease, "uploading")
    engine.complete(lease, {"url": "s3://cat"})
    raw = stored(engine, task.id)
    assert len(raw) == 5 and [WORKER in e for e in raw] == [False, True, False, False, False]
    assert all(WORKER in e for e in streamed(engine, task.id)[1:])  # claim, stages, complete
    expected = [
        ("transition", "submit", 0, ""),
        ("transition", "claim", 1, WORKER),
        ("stage", "", 1, WORKER),
        ("stage", "", 1, WORKER),
        ("transition", "complete", 1, WORKER),
    ]
    assert workers(engine.history(task.id)) == expected
    _task, page_history, _ = snapshot(engine, task.id, "alice")
    assert workers(page_history) == expected


def test_a_refused_caller_keeps_its_own_name_and_each_attempt_reads_its_own_claims(engine):
    task, stale, lease = reclaimed(engine)  # w1 claimed and released, w2 claimed
    with pytest.raises(LeaseLost):
        engine.stage(stale, "generating")  # refused: w1 is named in its entry
    engine.stage(lease, "generating")
    engine.reclaim(task.id, by="admin")  # expire: w2's attempt, w2's name read back
    raw = stored(engine, task.id)
    assert sum("|w1|" in e for e in raw) == 2 and sum("|w2|" in e for e in raw) == 1  # 2 claims, 1 stale
    history = [(kind, verb, worker) for kind, verb, _, worker in workers(engine.history(task.id))]
    assert history[:6] == [
        ("transition", "submit", ""),
        ("transition", "claim", "w1"),
        ("transition", "release", "w1"),
        ("transition", "claim", "w2"),
        ("stale", "stage", "w1"),
        ("stage", "", "w2"),
    ]
    assert ("transition", "expire", "w2") in history[6:]


def test_an_entry_by_another_worker_than_its_attempts_claim_names_it(engine):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.complete(dataclasses.replace(lease, worker="w9"), {"url": "s3://cat"})
    assert stored(engine, task.id)[-1].split("|")[6] == "w9"
    assert engine.history(task.id)[-1].worker == "w9"


def test_a_history_trimmed_past_its_claim_entry_still_names_its_worker(engine):
    capped = sibling(engine, Config(history_maxlen=3))
    task = capped.submit("render", {"prompt": "p"}, owner="alice")
    lease = capped.claim(task.id, WORKER)
    for stage in ("generating", "uploading", "generating", "uploading"):
        capped.stage(lease, stage)
    raw = stored(capped, task.id)
    assert len(raw) == 3 and not any(WORKER in e for e in raw)  # the claim entry is gone
    assert [e.worker for e in capped.history(task.id)] == [WORKER] * 3
    assert [e.worker for e in snapshot(capped, task.id)[1]] == [WORKER] * 3


def stream_times(engine, task_id) -> list[int]:
    queue = engine.get(task_id).queue
    return [round(ev["at"] * 1000) for ev in read_stream(engine, queue, "-") if ev["task_id"] == task_id]


def test_entry_times_count_from_the_tasks_creation_and_read_back_as_server_times(engine):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    engine.complete(lease, {"url": "s3://cat"})
    raw = stored(engine, task.id)
    created = int(engine.redis.hget(engine.keys.task(task.id).task, "created_at"))
    assert int(raw[0].split("|")[0]) == created and all(e.startswith("+") for e in raw[1:])
    assert [round(e.at * 1000) for e in engine.history(task.id)] == stream_times(engine, task.id)
    assert [round(e.at * 1000) for e in snapshot(engine, task.id)[1]] == stream_times(engine, task.id)


def test_a_history_trimmed_past_its_submit_entry_still_reads_server_times(engine):
    capped = sibling(engine, Config(history_maxlen=3))
    task = capped.submit("render", {"prompt": "p"}, owner="alice")
    lease = capped.claim(task.id, "w1")
    for stage in ("generating", "uploading", "generating"):
        capped.stage(lease, stage)
    raw = stored(capped, task.id)
    assert len(raw) == 3 and all(e.startswith("+") for e in raw)  # submit and claim entries gone
    assert [round(e.at * 1000) for e in capped.history(task.id)] == stream_times(capped, task.id)[-3:]
    assert [round(e.at * 1000) for e in snapshot(capped, task.id)[1]] == stream_times(capped, task.id)[-3:]
