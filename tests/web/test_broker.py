"""The SSE broker (web/broker.py): one reader thread fanning out to bounded buffers."""

from __future__ import annotations

import pytest

from ghostless.web.broker import Broker, Dropped, Subscriber
from tests.support.wait import wait_until


def test_an_owners_subscriber_gets_only_that_owners_events(engine):
    broker = Broker(engine, block_ms=50)
    try:
        mine = broker.subscribe(owner="alice")
        engine.submit("render", {"prompt": "b"}, owner="bob")
        task = engine.submit("render", {"prompt": "a"}, owner="alice")
        event = wait_until(lambda: mine.next(0.05), what="alice's event")
        assert (event["task_id"], event["kind"], event["to"], event["queue"]) == (
            task.id,
            "transition",
            "PENDING",
            "images",
        )
        assert mine.next(0.05) is None
    finally:
        broker.close()


def test_the_reader_notices_queues_created_after_it_started(engine):
    broker = Broker(engine, block_ms=50)
    try:
        sub = broker.subscribe(everything=True)
        wait_until(lambda: broker.positions, what="the reader to start")
        engine.redis.sadd(engine.keys.queues(), "late")
        engine.redis.xadd(
            engine.keys.queue_key("late", "events"), {"id": "late.x", "kind": "transition", "owner": "a", "at": "1"}
        )
        event = wait_until(lambda: sub.next(0.05), what="the late queue's event")
        assert (event["queue"], event["task_id"]) == ("late", "late.x")
    finally:
        broker.close()


def test_one_reader_thread_serves_every_subscriber(engine):
    import threading

    broker = Broker(engine, block_ms=50)
    try:
        subs = [broker.subscribe(everything=True) for _ in range(50)]
        readers = [t for t in threading.enumerate() if t.name == "ghostless-sse-broker"]
        assert len(readers) == 1
        engine.submit("render", {"prompt": "a"}, owner="alice")
        assert all(wait_until(lambda s=s: s.next(0.05), what="an event") for s in subs)
    finally:
        broker.close()
    assert not any(t.name == "ghostless-sse-broker" and t.is_alive() for t in threading.enumerate())


def test_a_closed_broker_takes_no_subscribers(engine):
    broker = Broker(engine, block_ms=50)
    broker.close()
    with pytest.raises(RuntimeError):
        broker.subscribe(everything=True)


def test_a_full_buffer_drops_the_subscriber_which_then_drains_and_ends():
    sub = Subscriber(limit=2)
    assert sub.offer({"n": 1}) and sub.offer({"n": 2})
    assert not sub.offer({"n": 3}) and not sub.offer({"n": 4})
    assert len(sub) == 2 and sub.dropped
    assert [sub.next(0)["n"], sub.next(0)["n"]] == [1, 2]
    with pytest.raises(Dropped):
        sub.next(0)


def test_a_waiting_subscriber_wakes_for_an_event_offered_from_another_thread():
    import threading
    import time

    sub = Subscriber(limit=10)
    got = []
    taker = threading.Thread(target=lambda: got.append(sub.next(30)))
    taker.start()
    started = time.monotonic()
    sub.offer({"n": 1})
    taker.join(10)
    assert got == [{"n": 1}] and time.monotonic() - started < 5


def test_a_subscriber_waits_its_whole_timeout_even_after_a_wake_up_for_an_event_already_taken():
    import time

    sub = Subscriber(limit=10)
    sub.offer({"n": 1})
    sub.offer({"n": 2})  # two wake-ups, one left over once both are taken
    assert [sub.next(0)["n"], sub.next(0)["n"]] == [1, 2]
    started = time.monotonic()
    assert sub.next(0.2) is None
    assert time.monotonic() - started >= 0.2


def test_ending_a_subscriber_wakes_its_waiting_stream_at_once():
    import threading
    import time

    sub = Subscriber(limit=10)
    sub.offer({"n": 1})
    assert sub.next(0)["n"] == 1
    outcome = []

    def take():
        try:
            sub.next(30)
        except Dropped:
            outcome.append("ended")

    taker = threading.Thread(target=take)
    taker.start()
    started = time.monotonic()
    sub.end()
    taker.join(10)
    assert outcome == ["ended"] and time.monotonic() - started < 5


def test_the_reader_outlives_a_long_outage_waiting_at_most_five_seconds(engine, monkeypatch):
    """Redis away for over a thousand reads in a row (~85 minutes at 5 s each): the pause stays
    at 5 s and the reader keeps trying (an unbounded 0.1 * 2 ** failures overflowed and killed it)."""
    import redis

    class Clock:  # the reader's stop event, waiting without time passing
        def __init__(self, waits: int):
            self.left, self.pauses = waits, []

        def is_set(self) -> bool:
            return self.left <= 0

        def wait(self, seconds: float) -> bool:
            self.pauses.append(seconds)
            self.left -= 1
            return self.is_set()

    def unreachable():
        raise redis.ConnectionError("Redis is away")

    broker = Broker(engine, block_ms=50)
    broker._stop = clock = Clock(1100)
    monkeypatch.setattr(broker, "_read_once", unreachable)
    monkeypatch.setattr("ghostless.web.broker.log.warning", lambda *a, **k: None)
    broker._run()  # returns once stopped, instead of dying of an OverflowError on the way
    assert len(clock.pauses) == 1100
    assert clock.pauses[:3] == [0.2, 0.4, 0.8] and max(clock.pauses) == clock.pauses[-1] == 5.0


def _event(task_id: str, owner: str) -> dict:
    return {"task_id": task_id, "owner": owner, "stream_id": "1-0", "queue": "images", "kind": "progress"}


def test_an_event_reaches_exactly_the_subscribers_of_its_task_its_owner_and_everything(engine):
    broker = Broker(engine, block_ms=50)
    try:
        task_a, task_a2, task_b = (broker.subscribe(task_id=t) for t in ("images.a", "images.a", "images.b"))
        alice, bob, admin = (
            broker.subscribe(owner="alice"),
            broker.subscribe(owner="bob"),
            broker.subscribe(everything=True),
        )
        broker._fan_out(_event("images.a", "alice"))
        assert [len(s) for s in (task_a, task_a2, task_b, alice, bob, admin)] == [1, 1, 0, 1, 0, 1]
        broker.unsubscribe(task_a)
        broker.unsubscribe(task_a)  # again: nothing
        broker._fan_out(_event("images.a", "alice"))
        assert [len(s) for s in (task_a, task_a2, alice, admin)] == [1, 2, 2, 2]
        assert broker.subscribers() == 5
    finally:
        broker.close()


def test_an_event_costs_only_the_subscribers_who_want_it(engine, monkeypatch):
    broker = Broker(engine, block_ms=50)
    offered = []
    monkeypatch.setattr(Subscriber, "offer", lambda self, event: offered.append(self) or True)
    try:
        watchers = [broker.subscribe(task_id=f"images.{i}") for i in range(5000)]
        others = [broker.subscribe(owner=f"user{i}") for i in range(1000)]
        broker._fan_out(_event("images.42", "user7"))
        assert offered == [watchers[42], others[7]]  # not one call for the other 5,998
    finally:
        broker.close()


def test_a_subscription_names_one_thing_to_watch(engine):
    broker = Broker(engine, block_ms=50)
    try:
        for kwargs in ({}, {"task_id": "images.a", "owner": "alice"}, {"owner": "alice", "everything": True}):
            with pytest.raises(ValueError):
                broker.subscribe(**kwargs)
        assert broker.subscribers() == 0
    finally:
        broker.close()


def test_a_slow_task_subscriber_is_dropped_and_unindexed_while_the_others_go_on(engine):
    broker = Broker(engine, block_ms=50, limit=2)
    try:
        slow, reading = broker.subscribe(task_id="images.a"), broker.subscribe(task_id="images.a", limit=100)
        for _ in range(5):
            broker._fan_out(_event("images.a", "alice"))
        assert slow.dropped and len(slow) == 2 and len(reading) == 5
        assert broker.wanting(_event("images.a", "alice")) == [reading] and broker.subscribers() == 1
    finally:
        broker.close()


def test_a_ticked_subscribers_wait_arms_no_timer_and_ends_at_most_a_tick_late(engine):
    import threading
    import time

    broker = Broker(engine, block_ms=50, tick=0.05)
    try:
        sub = broker.subscribe(everything=True, ticked=True)
        assert sub.ticked and not broker.subscribe(everything=True).ticked  # only those that ask
        waits = []
        real = type(sub._wake).acquire

        class Lock:  # the subscriber's lock, recording each wait's timeout
            def __init__(self, lock):
                self.lock = lock

            def acquire(self, blocking=True, timeout=-1):
                waits.append(timeout)
                return real(self.lock, blocking, timeout)

            def release(self):
                self.lock.release()

        sub._wake = Lock(sub._wake)
        start = time.monotonic()
        assert sub.next(0.2) is None
        took = time.monotonic() - start
        assert 0.2 <= took < 0.2 + 0.05 + 1.0 and waits and set(waits) == {-1}  # the ticker woke it; no timer
        got = []
        waiter = threading.Thread(target=lambda: got.append(sub.next(30.0)))
        waiter.start()
        engine.submit("render", {"prompt": "a"}, owner="alice")
        waiter.join(5)  # long before its wait (and the ticker) would end it: the event woke it
        assert not waiter.is_alive() and got[0]["kind"] == "transition"
    finally:
        broker.close()


def test_after_its_broker_closes_a_ticked_subscriber_waits_on_its_own_timer(engine):
    import threading
    import time

    broker = Broker(engine, block_ms=50, tick=0.05)
    sub = broker.subscribe(everything=True, ticked=True)
    got = []
    waiter = threading.Thread(target=lambda: got.append(sub.next(0.5)))
    waiter.start()
    wait_until(lambda: sub.due > 0, what="the wait to begin")
    broker.close()
    start = time.monotonic()
    waiter.join(5)
    assert not waiter.is_alive() and got == [None] and not sub.ticked
    assert time.monotonic() - start < 2.0


def test_the_apps_ticker_follows_the_keep_alive_interval_within_bounds(make_app):
    ticks = {}
    for keepalive in (15.0, 0.05, 0.0):
        app = make_app(GHOSTLESS_SSE_KEEPALIVE=keepalive)
        ticks[keepalive] = app.extensions["ghostless"].broker.tick
    assert ticks == {15.0: 1.0, 0.05: 0.025, 0.0: 0.01}  # at most 1 s; half the interval; never 0 (a spin)
