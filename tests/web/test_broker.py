"""The SSE broker (web/broker.py): one reader thread fanning out to bounded buffers."""

from __future__ import annotations

import pytest

from ghostless.web.broker import Broker, Dropped, Subscriber
from tests.support.wait import wait_until


def test_a_subscriber_gets_only_the_events_its_filter_accepts(engine):
    broker = Broker(engine, block_ms=50)
    try:
        mine = broker.subscribe(lambda ev: ev["owner"] == "alice")
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
        sub = broker.subscribe(lambda ev: True)
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
        subs = [broker.subscribe(lambda ev: True) for _ in range(50)]
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
        broker.subscribe(lambda ev: True)


def test_a_full_buffer_drops_the_subscriber_which_then_drains_and_ends():
    sub = Subscriber(lambda ev: True, limit=2)
    assert sub.offer({"n": 1}) and sub.offer({"n": 2})
    assert not sub.offer({"n": 3}) and not sub.offer({"n": 4})
    assert len(sub) == 2 and sub.dropped
    assert [sub.next(0)["n"], sub.next(0)["n"]] == [1, 2]
    with pytest.raises(Dropped):
        sub.next(0)


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
