"""How a task is stored (issue 15): a hash that keeps only the fields it has, and one body list
[args JSON, result JSON, history...] instead of three keys; a task stored the older way (args,
result and history each under its own key) still runs, reads and goes. On fakeredis and a real
redis-server."""

import json
import time

import pytest

from ghostless import Config, LeaseLost, State
from ghostless.core.errors import AttemptEnded
from ghostless.core.keys import BODY_HISTORY
from tests.support.snapshots import raw_task, sibling
from tests.support.wait import wait_for_server_time

ATTEMPT_FIELDS = ("lease_until", "attempt_deadline", "stage_deadline", "stage_since")
ATTEMPT_SETTINGS = ("lease_ms", "timeout_ms", "backoff")


def lifecycle(engine, **submit):
    task = engine.submit("render", {"prompt": "cat"}, owner="alice", **submit)
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    engine.progress(lease, 0.5, "half")
    engine.stage(lease, "uploading")
    engine.complete(lease, {"url": "s3://x"})
    return task.id


def test_a_successful_task_stores_nothing_its_state_implies_and_still_answers_its_lease_holder(engine):
    task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.progress(lease, 0.5, "half")
    assert engine.complete(lease, {"url": "s3://x"}) == State.SUCCESS
    h = raw_task(engine, task.id)
    assert [k for k in ("progress", "ended_token", "ended_by") if k in h] == []
    assert (engine.get(task.id).progress, engine.get(task.id).message) == (1.0, "half")
    assert engine.complete(lease, {"url": "s3://x"}) == State.SUCCESS  # a resent complete: replayed
    with pytest.raises(AttemptEnded):  # the late heartbeat of the attempt that ended it
        engine.heartbeat(lease)
    with pytest.raises(LeaseLost):
        engine.fail(lease, "boom", "late")
    assert raw_task(engine, task.id) == h  # the refusals changed nothing
    assert engine.get(task.id).status == State.SUCCESS and engine.check() == []


def test_a_finished_task_keeps_no_empty_field_and_none_of_its_attempts_deadlines(engine):
    tid = lifecycle(engine)
    h = raw_task(engine, tid)
    assert h["status"] == "SUCCESS"
    assert [k for k, v in h.items() if v == ""] == []
    assert [k for k in ATTEMPT_FIELDS if k in h] == []
    task = engine.get(tid)  # what is absent reads as its default
    assert (task.reason, task.error_kind, task.next_retry_at, task.lease_deadline) == ("", "", None, None)
    assert task.stage == "uploading" and task.result == {"url": "s3://x"}


def test_a_task_stores_nothing_it_implies_and_reads_it_all(engine):
    task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    assert {"id", "queue", "updated_at", "finished_at"} & raw_task(engine, task.id).keys() == set()
    assert (engine.get(task.id).id, engine.get(task.id).queue) == (task.id, "images")  # from the key
    lease = engine.claim(task.id, "w1")
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["state_since"]) + 2)
    engine.progress(lease, 0.5, "half")  # a touch: updated_at moves past state_since, stored
    h = raw_task(engine, task.id)
    assert int(h["updated_at"]) > int(h["state_since"]) and "finished_at" not in h
    running = engine.get(task.id)
    assert running.updated_at == int(h["updated_at"]) / 1000 and running.finished_at is None
    engine.fail(lease, "boom", "no", retryable=False)
    h = raw_task(engine, task.id)
    assert "updated_at" not in h and "finished_at" not in h  # both are its state_since
    failed = engine.get(task.id)
    assert failed.updated_at == failed.finished_at == int(h["state_since"]) / 1000
    assert failed.finished_at >= running.updated_at
    engine.retry(task.id, by="alice")
    assert engine.get(task.id).finished_at is None


def test_a_task_that_can_have_no_further_attempt_keeps_no_attempt_settings(engine):
    done = lifecycle(engine)
    cancelled = engine.submit("render", {}, owner="alice")
    engine.cancel(cancelled.id, by="alice")
    for tid in (done, cancelled.id):
        h = raw_task(engine, tid)
        assert h["status"] in ("SUCCESS", "CANCELLED") and [k for k in ATTEMPT_SETTINGS if k in h] == []
    failed = engine.submit("render", {}, owner="alice")
    engine.fail(engine.claim(failed.id, "w1"), "bad_prompt", "no")  # permanent: FAILED, retry may reopen it
    assert all(raw_task(engine, failed.id).get(k) for k in ATTEMPT_SETTINGS)
    engine.retry(failed.id, by="alice")
    lease = engine.claim(failed.id, "w1")  # the reopened task runs with the settings it kept
    assert lease.lease == 30.0 and engine.get(failed.id).lease_deadline is not None


def test_priority_zero_is_stored_as_no_field(engine):
    plain = engine.submit("render", {}, owner="alice")
    urgent = engine.submit("render", {}, owner="alice", priority=5)
    assert "priority" not in raw_task(engine, plain.id) and raw_task(engine, urgent.id)["priority"] == "5"
    assert (engine.get(plain.id).priority, engine.get(urgent.id).priority) == (0, 5)


def test_a_running_task_has_its_deadlines_and_loses_them_when_the_attempt_ends(engine):
    task = engine.submit("render", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    h = raw_task(engine, task.id)
    assert all(h.get(k) for k in ATTEMPT_FIELDS)
    assert engine.get(task.id).lease_deadline is not None
    engine.fail(lease, "boom", "it broke")  # retried: RETRY_WAITING
    h = raw_task(engine, task.id)
    assert h["status"] == "RETRY_WAITING" and [k for k in ATTEMPT_FIELDS if k in h] == []
    assert [k for k, v in h.items() if v == ""] == []


def test_a_task_is_its_hash_and_its_body(engine):
    tid = lifecycle(engine)
    k, r = engine.keys.task(tid), engine.redis
    assert r.exists(k.args, k.result, k.history) == 0
    body = r.lrange(k.body, 0, -1)
    assert json.loads(body[0]) == {"prompt": "cat"} and json.loads(body[1]) == {"url": "s3://x"}
    history = engine.history(tid)
    assert len(body) - BODY_HISTORY == len(history) == 5  # submit, claim, 2 stages, complete (progress: stream only)
    assert [e.kind for e in history][:2] == ["transition", "transition"]


def test_the_body_keeps_args_and_result_while_its_history_is_capped(engine):
    capped = sibling(engine, config=Config(history_maxlen=3))
    task = capped.submit("render", {"prompt": "dog"}, owner="alice")
    lease = capped.claim(task.id, "w1")
    for i in range(5):
        capped.progress(lease, i / 10, f"step {i}")  # progress is in the stream, not the history
        capped.stage(lease, "generating" if i % 2 == 0 else "uploading")
    capped.complete(lease, {"n": 5})
    k = engine.keys.task(task.id)
    assert engine.redis.llen(k.body) == BODY_HISTORY + 3
    got = capped.get(task.id)
    assert got.args == {"prompt": "dog"} and got.result == {"n": 5}
    assert [e.kind for e in capped.history(task.id)][-1] == "transition"


def test_engines_of_other_settings_on_one_redis_each_keep_their_own_while_they_take_turns(engine):
    """A script parses its settings once while they stay the same (engine/core/lua_source.py config):
    engines that share a Redis with other settings, calling in turn, each get theirs."""
    short, long = sibling(engine, config=Config(history_maxlen=3)), sibling(engine, config=Config(history_maxlen=6))
    leases = [e.claim(e.submit("render", {"prompt": "dog"}, owner="alice").id, "w1") for e in (short, long)]
    for i in range(5):  # 7 entries each with the submit's and the claim's
        for e, lease in zip((short, long), leases):
            e.stage(lease, "generating" if i % 2 == 0 else "uploading")
    kept = [engine.redis.llen(engine.keys.task(lease.task_id).body) - BODY_HISTORY for lease in leases]
    assert kept == [3, 6]


def to_legacy(engine, task_id: str) -> None:
    """Store a task as a release before the body did: args, result and history under their own keys,
    and its id and queue in its hash."""
    k, r = engine.keys.task(task_id), engine.redis
    r.hset(k.task, mapping={"id": task_id, "queue": task_id.split(".")[0]})
    body = r.lrange(k.body, 0, -1)
    r.set(k.args, body[0])
    if body[1]:
        r.set(k.result, body[1])
    r.rpush(k.history, *body[BODY_HISTORY:])
    r.delete(k.body)


def test_a_task_stored_before_the_body_runs_to_the_end(engine):
    task = engine.submit("render", {"prompt": "old"}, owner="alice")
    to_legacy(engine, task.id)
    lease = engine.claim(task.id, "w1")
    assert lease.args == {"prompt": "old"}
    engine.stage(lease, "generating")
    engine.complete(lease, {"url": "s3://old"})
    k, r = engine.keys.task(task.id), engine.redis
    assert not r.exists(k.body)  # nothing written in the new layout for it
    got = engine.get(task.id)
    assert got.status == State.SUCCESS and got.args == {"prompt": "old"} and got.result == {"url": "s3://old"}
    assert [e.to for e in engine.history(task.id) if e.kind == "transition"] == ["PENDING", "PROCESSING", "SUCCESS"]
    assert engine.check() == []


@pytest.mark.parametrize("legacy", [False, True])
def test_purge_deletes_every_key_of_a_task(engine, legacy):
    quick = sibling(engine, config=Config(retention=0.001, idempotency_ttl=0.001))
    tid = lifecycle(quick)
    if legacy:
        to_legacy(engine, tid)
    k = engine.keys.task(tid)
    deadline = time.monotonic() + 10
    while quick.sweep().purged == 0:
        assert time.monotonic() < deadline, "the sweeper never purged the task"
    assert engine.redis.exists(k.task, k.body, k.args, k.result, k.history) == 0
