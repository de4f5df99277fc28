"""Submit quotas: per owner and queue, checked inside the submit and edit scripts, with counts of
unfinished tasks and their args bytes that every ending transition takes back."""

import json
import threading

import pytest

from ghostless import Quota, QuotaExceeded, State
from tests.support.wait import server_ms, wait_for_server_time


def held(engine, owner: str, queue: str = "images") -> tuple[int, int]:
    """(unfinished tasks, their args bytes) the owners hash holds for ``owner``."""
    h = engine.redis.hmget(engine.keys.queue_key(queue, "owners"), f"n:{owner}", f"b:{owner}")
    return int(h[0] or 0), int(h[1] or 0)


def size(args: dict) -> int:
    return len(json.dumps(args, sort_keys=True, separators=(",", ":")).encode())


def test_submits_past_the_unfinished_limit_are_refused_until_a_task_ends(engine):
    quota = Quota(max_unfinished=2)
    first = engine.submit("render", {"prompt": "a"}, owner="alice", quota=quota)
    engine.submit("render", {"prompt": "b"}, owner="alice", quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        engine.submit("render", {"prompt": "c"}, owner="alice", quota=quota)
    assert (refused.value.limit, refused.value.retry_after, refused.value.owner, refused.value.queue) == (
        "max_unfinished",
        None,
        "alice",
        "images",
    )
    assert engine.stats()["images"]["counts"]["PENDING"] == 2  # the refused one wrote nothing
    engine.cancel(first.id, by="alice")
    engine.submit("render", {"prompt": "c"}, owner="alice", quota=quota)
    assert engine.check() == []


def test_limits_apply_per_owner_and_per_queue(engine):
    quota = Quota(max_unfinished=1)
    engine.submit("render", {}, owner="alice", quota=quota)
    engine.submit("render", {}, owner="bob", quota=quota)  # another owner
    engine.submit("brief", {}, owner="alice", quota=quota)  # another queue
    with pytest.raises(QuotaExceeded):
        engine.submit("quick", {}, owner="alice", quota=quota)  # quick shares render's queue


def test_the_args_bytes_of_unfinished_tasks_are_limited(engine):
    args = {"prompt": "x" * 90}
    quota = Quota(max_unfinished_bytes=2 * size(args) + 5)
    engine.submit("render", args, owner="alice", quota=quota)
    engine.submit("render", args, owner="alice", quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        engine.submit("render", args, owner="alice", quota=quota)
    assert refused.value.limit == "max_unfinished_bytes"
    assert held(engine, "alice") == (2, 2 * size(args))


def test_one_tasks_args_over_the_quotas_limit_are_a_value_error(engine):
    with pytest.raises(ValueError, match="over the limit of 100"):
        engine.submit("render", {"prompt": "x" * 100}, owner="alice", quota=Quota(max_args_bytes=100))
    assert held(engine, "alice") == (0, 0)


def test_submits_past_the_rate_are_refused_saying_when_to_retry(engine):
    quota = Quota(rate=3, per=60)
    for n in range(3):
        engine.submit("render", {"prompt": str(n)}, owner="alice", quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        engine.submit("render", {"prompt": "4"}, owner="alice", quota=quota)
    assert refused.value.limit == "rate" and 0 < refused.value.retry_after <= 20  # one call per 20 s
    engine.submit("render", {"prompt": "4"}, owner="bob", quota=quota)  # bob's rate is his own


def test_the_rate_refills_over_its_period(engine):
    # Each submit moves the bucket on by per / rate: the third is refused while the three come
    # within 0.5 s (0.1 s with per=0.2 was missed on a loaded CI host).
    quota = Quota(rate=2, per=1.0)
    engine.submit("render", {}, owner="alice", quota=quota)
    engine.submit("render", {}, owner="alice", quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        engine.submit("render", {}, owner="alice", quota=quota)
    wait_for_server_time(engine.redis, server_ms(engine.redis) + refused.value.retry_after * 1000)
    engine.submit("render", {}, owner="alice", quota=quota)


def test_a_replayed_idempotent_submit_is_not_charged(engine):
    quota = Quota(rate=1, max_unfinished=1)
    task = engine.submit("render", {}, owner="alice", idempotency_key="k", quota=quota)
    again = engine.submit("render", {}, owner="alice", idempotency_key="k", quota=quota)
    assert again.id == task.id and again.replayed


def test_an_edit_counts_against_the_rate_and_cannot_grow_past_the_byte_limit(engine):
    small, big = {"prompt": "x"}, {"prompt": "x" * 200}
    task = engine.submit("render", small, owner="alice")
    with pytest.raises(QuotaExceeded) as refused:
        engine.edit(task.id, big, by="alice", quota=Quota(max_unfinished_bytes=100))
    assert refused.value.limit == "max_unfinished_bytes"
    assert engine.get(task.id).status == State.PENDING  # refused before any write
    grown = engine.edit(task.id, big, by="alice")  # no quota: Python callers have none by default
    shrunk = engine.edit(grown.id, small, by="alice", quota=Quota(max_unfinished_bytes=100))  # over, shrinking
    assert held(engine, "alice") == (1, size(small))
    quota = Quota(rate=1)
    engine.edit(shrunk.id, big, by="alice", quota=quota)
    with pytest.raises(QuotaExceeded, match="rate"):
        engine.edit(engine.get(shrunk.id).superseded_by, small, by="alice", quota=quota)


def test_concurrent_submits_never_pass_the_unfinished_limit(redis_client, engine):
    quota, made, refused = Quota(max_unfinished=5), [], []

    def submit():
        for _ in range(4):
            try:
                made.append(engine.submit("render", {}, owner="alice", quota=quota))
            except QuotaExceeded:
                refused.append(1)

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert (len(made), len(refused)) == (5, 11)
    assert held(engine, "alice") == (5, 5 * size({}))


def test_every_ending_takes_the_task_out_of_the_counts_and_a_manual_retry_puts_it_back(engine):
    args = {"prompt": "abc"}
    tasks = {}
    for how in ("complete", "fail", "cancel", "edit", "expire"):
        tasks[how] = engine.submit("render" if how != "expire" else "brief", args, owner="alice")
    assert held(engine, "alice") == (4, 4 * size(args)) and held(engine, "alice", "other") == (1, size(args))
    engine.complete(engine.claim(tasks["complete"].id, "w1"), {})
    engine.fail(engine.claim(tasks["fail"].id, "w1"), "bad_prompt", "no", retryable=False)
    engine.cancel(tasks["cancel"].id, by="alice")
    edited = engine.edit(tasks["edit"].id, {"prompt": "longer"}, by="alice")
    assert held(engine, "alice") == (1, size({"prompt": "longer"}))
    engine.claim(tasks["expire"].id, "w1")  # brief: one attempt, a 50 ms attempt timeout
    wait_for_server_time(engine.redis, engine.get(tasks["expire"].id).lease_deadline * 1000 + 1)
    engine.sweep()
    assert engine.get(tasks["expire"].id).status == State.TIMEOUT
    assert held(engine, "alice", "other") == (0, 0)
    engine.cancel(edited.id, by="alice")
    assert held(engine, "alice") == (0, 0)
    assert engine.redis.hlen(engine.keys.queue_key("images", "owners")) == 0  # no zero fields kept
    engine.retry(tasks["fail"].id, by="alice")
    engine.retry(tasks["expire"].id, by="alice")
    assert held(engine, "alice") == (1, size(args)) and held(engine, "alice", "other") == (1, size(args))
    assert engine.check() == []


def test_a_retried_timeout_keeps_the_task_counted_through_its_passing_timeout_state(engine):
    task = engine.submit("quick", {}, owner="alice")  # two attempts, a 50 ms lease
    engine.claim(task.id, "w1")
    wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000 + 1)
    engine.sweep()
    assert engine.get(task.id).status in (State.PENDING, State.RETRY_WAITING)
    assert held(engine, "alice") == (1, size({}))
    assert engine.check() == []


def test_a_task_that_was_never_counted_ends_without_taking_its_owners_counts_below_zero(engine):
    """As for a task submitted before the counts existed: they are exact again once the owner has
    no unfinished task left."""
    old = engine.submit("render", {"prompt": "old"}, owner="alice")
    engine.redis.delete(engine.keys.queue_key("images", "owners"))
    new = engine.submit("render", {}, owner="alice")
    engine.cancel(old.id, by="alice")
    engine.cancel(new.id, by="alice")
    assert engine.redis.hgetall(engine.keys.queue_key("images", "owners")) == {}
    assert engine.check() == []


def test_check_reports_counts_that_do_not_match_the_tasks(engine):
    engine.submit("render", {}, owner="alice")
    engine.redis.hincrby(engine.keys.queue_key("images", "owners"), "n:alice", 1)
    engine.redis.hset(engine.keys.queue_key("images", "owners"), "b:mallory", 7)
    problems = engine.check()
    assert any("'alice' is counted with 2 unfinished tasks but a scan finds 1" in p for p in problems)
    assert any("'mallory' is counted with 7 args bytes" in p for p in problems)


def test_python_callers_have_no_quota_by_default(engine):
    for _ in range(150):
        engine.submit("render", {}, owner="alice")
    assert held(engine, "alice")[0] == 150


@pytest.mark.parametrize(
    "bad",
    [
        dict(rate=0),
        dict(max_unfinished=-1),
        dict(per=0),
        dict(rate=1.5),
        dict(max_unfinished_bytes=True),
        dict(per=float("nan")),
    ],
)
def test_a_quota_with_bad_limits_is_a_value_error(bad):
    with pytest.raises(ValueError):
        Quota(**bad)
