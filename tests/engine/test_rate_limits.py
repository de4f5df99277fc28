"""Rate limits per upstream: decided by the claim on Redis time, across every worker; a task over the
limit is parked without consuming an attempt and comes back when its start slot frees."""

import threading

import pytest

from ghostless import BadRate, Engine, GhostlessError, Rate, RateLimited, State, UpstreamBusy
from ghostless.core.clients import client_like
from tests.support.wait import server_ms, wait_for_server_time, wait_until


def limited(engine, rate="2/s", upstream="image-model", names=("paint", "sketch"), queue="images"):
    """Types that all call one upstream under one rate limit (no breaker: only the limit acts)."""
    for name in names:
        engine.task(name=name, queue=queue, lease=30, max_attempts=2, upstream=upstream, breaker=False, rate=rate)(
            lambda ctx, **kw: None
        )
    return engine


def starts(engine, task_ids) -> list[int]:
    """Every attempt start of the tasks (ms, Redis time), from their histories."""
    return sorted(round(e.at * 1000) for tid in task_ids for e in engine.history(tid) if e.verb == "claim")


def most_in_any_window(times: list[int], period_ms: int) -> int:
    """The most starts in any half-open window [t, t + period) (t: each start; the busiest window
    begins at a start)."""
    return max((sum(1 for u in times if t <= u < t + period_ms) for t in times), default=0)


@pytest.mark.parametrize(
    "text, limit, period",
    [("20/s", 20, 1), ("600/min", 600, 60), ("1000/h", 1000, 3600), ("5/10s", 5, 10), ("100/day", 100, 86400)],
)
def test_a_rate_is_a_count_per_unit(text, limit, period):
    assert Rate.parse(text) == Rate(limit, period)
    assert Rate.parse(" 20 / sec ") == Rate(20, 1) and Rate.parse("3/minutes") == Rate(3, 60)


@pytest.mark.parametrize("bad", ["", "20", "20/", "/s", "0/s", "-1/s", "20/0s", "20/fortnight", "1.5/s", "20/s/s", 20])
def test_a_bad_rate_is_refused_with_a_typed_value_error(engine, bad):
    with pytest.raises(BadRate) as refused:
        engine.task(name="bad", queue="images", rate=bad)
    assert isinstance(refused.value, ValueError) and refused.value.rate == bad
    assert "bad" not in engine.registry


def test_a_rate_over_the_largest_window_log_or_of_zero_length_is_refused():
    with pytest.raises(BadRate, match=r"1\.\.10000"):
        Rate.parse("10001/s")
    with pytest.raises(BadRate, match="period"):
        Rate(5, 0)


def test_types_naming_one_upstream_must_give_the_same_rate_in_one_queue(engine):
    limited(engine, "2/s", names=("paint",))
    with pytest.raises(ValueError, match="different rates"):
        limited(engine, "3/s", names=("sketch",))
    with pytest.raises(ValueError, match="different rates"):
        limited(engine, None, names=("outline",))
    with pytest.raises(ValueError, match="one queue"):
        limited(engine, "2/s", names=("remote",), queue="other")
    limited(engine, "2/s", names=("sketch",))  # the same rate: one shared limit
    assert [r["upstream"] for r in engine.rate_limits()] == ["image-model"]


def test_over_the_limit_a_claim_changes_nothing_and_the_park_keeps_the_attempt(engine):
    limited(engine)
    first, second, third = (engine.submit(n, {}, owner="alice") for n in ("paint", "sketch", "paint"))
    engine.claim(first.id, "w1")
    engine.claim(second.id, "w2")  # the other type: the same upstream's limit
    with pytest.raises(RateLimited) as refused:
        engine.claim(third.id, "w1")
    e = refused.value
    assert isinstance(e, UpstreamBusy) and (e.upstream, e.kind) == ("image-model", "rate_limited")
    assert engine.get(third.id).status == State.PENDING  # nothing changed
    assert engine.park(third.id, e.wait, e.upstream, e.kind) == State.RETRY_WAITING
    parked = engine.get(third.id)
    assert (parked.attempt, parked.error_kind, parked.reason) == (0, "rate_limited", "rate_limited: image-model")
    # It waits until the first start leaves the window, to the ms: not a fixed pause.
    assert round(parked.next_retry_at * 1000) == starts(engine, [first.id])[0] + 1000
    assert engine.check() == []


def test_a_parked_task_starts_when_the_window_allows_with_its_attempts_whole(engine):
    limited(engine, Rate(1, 1.0))  # a window a loaded host's pause fits in
    first, waiting = (engine.submit("paint", {}, owner="alice") for _ in range(2))
    engine.claim(first.id, "w1")
    with pytest.raises(RateLimited) as refused:
        engine.claim(waiting.id, "w1")
    engine.park(waiting.id, refused.value.wait, refused.value.upstream, refused.value.kind)
    wait_for_server_time(engine.redis, engine.get(waiting.id).next_retry_at * 1000)
    assert engine.sweep().promoted == 1
    lease = engine.claim(waiting.id, "w2")
    assert lease.attempt == 1 and lease.max_attempts == 2  # the park consumed none
    assert starts(engine, [waiting.id])[0] >= starts(engine, [first.id])[0] + 1000
    assert engine.rate_limits()[0]["parked"] == 0


def test_each_parked_task_is_given_its_own_slot(engine):
    limited(engine, Rate(2, 2.0))  # the four refusals come within a window, however loaded the host
    tasks = [engine.submit("paint", {}, owner="alice") for _ in range(6)]
    for t in tasks[:2]:
        engine.claim(t.id, "w1")
    s1, s2 = starts(engine, [t.id for t in tasks[:2]])
    for t in tasks[2:]:
        with pytest.raises(RateLimited) as refused:
            engine.claim(t.id, "w1")
        engine.park(t.id, refused.value.wait, refused.value.upstream, refused.value.kind)
    due = [round(engine.get(t.id).next_retry_at * 1000) for t in tasks[2:]]
    assert due == [s1 + 2000, s2 + 2000, s1 + 4000, s2 + 4000]
    row = engine.rate_limits()[0]
    assert (row["rate"], row["used"], row["available"], row["parked"], row["parked_total"]) == ("2/2s", 2, 0, 4, 4)


def test_the_window_slides_a_start_frees_its_slot_one_period_after_it(engine):
    # windows of about a second between the steps: a loaded host's pauses fit in them
    limited(engine, Rate(2, 2.0))
    a, b, c, d = (engine.submit("paint", {}, owner="alice") for _ in range(4))
    engine.claim(a.id, "w1")
    wait_for_server_time(engine.redis, starts(engine, [a.id])[0] + 1000)
    engine.claim(b.id, "w1")
    with pytest.raises(RateLimited):
        engine.claim(c.id, "w1")
    wait_for_server_time(engine.redis, starts(engine, [a.id])[0] + 2000 - 1)  # a leaves the window
    engine.claim(c.id, "w1")
    with pytest.raises(RateLimited):  # b is still in it
        engine.claim(d.id, "w1")
    assert most_in_any_window(starts(engine, [a.id, b.id, c.id]), 2000) <= 2


def test_two_workers_on_their_own_clients_never_start_more_than_the_limit_in_any_window(engine, request):
    """Two engines (each its own client and pool) run tasks as workers do: claim, or park when
    limited; a sweeper promotes the parked. Start times come from the histories (Redis time)."""
    limited(engine, Rate(3, 0.25))
    other = limited(Engine(client_like(engine.redis), namespace=engine.keys.ns, dispatcher=None), Rate(3, 0.25))
    task_ids = [engine.submit("paint" if n % 2 else "sketch", {}, owner="alice").id for n in range(12)]
    done, stop = set(), threading.Event()

    def worker(e: Engine, name: str) -> None:
        while not stop.is_set():
            for tid in [t for t in task_ids if t not in done]:
                try:
                    lease = e.claim(tid, name)
                except RateLimited as busy:
                    try:
                        e.park(tid, busy.wait, busy.upstream, busy.kind)
                    except GhostlessError:  # claimed or parked by the other worker meanwhile
                        pass
                    continue
                except GhostlessError:  # claimed, parked or done by the other worker: the next one
                    continue
                e.complete(lease, {})
                done.add(tid)
            e.sweep()

    threads = [threading.Thread(target=worker, args=(e, n)) for e, n in ((engine, "w1"), (other, "w2"))]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(done) == len(task_ids), timeout=30, what="every task done")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    times = starts(engine, task_ids)
    assert len(times) == len(task_ids)  # one start each: a park consumed no attempt
    assert most_in_any_window(times, 250) <= 3
    assert engine.rate_limits()[0]["parked_total"] > 0  # the limit acted: claims were refused and parked
    assert all(engine.get(tid).attempt == 1 for tid in task_ids)
    assert engine.check() == []


def test_without_a_rate_an_upstream_is_not_limited(engine):
    engine.task(name="free", queue="images", upstream="free-model")(lambda ctx: None)
    for _ in range(5):
        engine.claim(engine.submit("free", {}, owner="alice").id, "w1")
    assert engine.rate_limits() == []


def test_the_limit_reads_redis_time(engine):
    limited(engine, Rate(1, 60))
    engine.claim(engine.submit("paint", {}, owner="alice").id, "w1")
    [row] = engine.rate_limits()
    log = engine.keys.rate_log("images", "image-model")
    assert row["used"] == 1 and 59_000 < engine.redis.pttl(log) <= 60_000
    assert int(engine.redis.zrange(log, 0, 0, withscores=True)[0][1]) <= server_ms(engine.redis)


def test_a_new_task_does_not_take_the_slot_a_parked_task_holds(engine):
    limited(engine, Rate(1, 1.0))  # a window a loaded host's pause fits in
    first, parked, fresh = (engine.submit("paint", {}, owner="alice") for _ in range(3))
    engine.claim(first.id, "w1")
    with pytest.raises(RateLimited) as refused:
        engine.claim(parked.id, "w1")
    engine.park(parked.id, refused.value.wait, refused.value.upstream, refused.value.kind)
    wait_for_server_time(engine.redis, engine.get(parked.id).next_retry_at * 1000)
    with pytest.raises(RateLimited):  # the slot is open, but the parked task is first in line
        engine.claim(fresh.id, "w2")
    engine.sweep()
    assert engine.claim(parked.id, "w1").attempt == 1
