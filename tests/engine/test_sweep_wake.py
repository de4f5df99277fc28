"""A sleeping sweeper is woken by a deadline set sooner than its next look (lua/lib/record.lua
publishes it; engine/core/sweep.py Wake listens), so a short retry is promoted when it is due, not at
the sweeper's next wake-up."""

from tests.support.snapshots import claimed
from tests.support.sweeper import sleeping_sweeper
from tests.support.wait import wait_until


def messages(pubsub, n_max=10):
    """The pattern messages: waits for the first (a cluster's bus may take a while), then takes
    what follows within 0.2 s of each other."""
    out = [wait_until(lambda: pubsub.get_message(timeout=0.05), 5, what="a message")]
    for _ in range(n_max - 1):
        m = pubsub.get_message(timeout=0.2)
        if m is None:
            break
        out.append(m)
    return [m for m in out if m["type"] == "pmessage"]


def test_a_retry_due_sooner_than_the_wake_window_is_announced_on_its_sets_channel(engine):
    pubsub = engine.redis.pubsub()
    pubsub.psubscribe(*engine.keys.deadline_channels())
    wait_until(lambda: pubsub.get_message(timeout=0.05) is not None, 5, what="subscribed")
    soon, _ = claimed(engine)
    engine.fail(
        engine.claim(engine.submit("render", {"prompt": "x"}, owner="alice").id, "w2"), "boom", retry_in=30
    )  # later than the window: no message
    engine.fail(_, "boom", retry_in=0.3)
    got = messages(pubsub)
    k = engine.keys.task(soon.id)
    assert [(m["channel"].decode(), int(float(m["data"]))) for m in got] == [
        (k.retries, int(engine.redis.zscore(k.retries, soon.id)))
    ]
    pubsub.close()


def test_a_sleeping_sweeper_promotes_a_short_retry_when_it_is_due_not_at_its_next_wake_up(engine):
    task, lease = claimed(engine)
    with sleeping_sweeper(engine):  # its tick saw only this lease (30 s away): it sleeps for 30 s
        engine.fail(lease, "boom", retry_in=0.2)
        wait_until(lambda: engine.get(task.id).status.value == "PENDING", 10, what="the retry promoted")


def test_a_starting_sweeper_hears_a_deadline_announced_just_after_its_first_look(engine, monkeypatch):
    """Its wake-up thread subscribes 0.5 s late (a loaded host): the first look waits for the
    subscription, so a short retry set after that look still wakes it."""
    import time

    import redis.client

    subscribe = redis.client.PubSub.psubscribe

    def late(self, *args, **kwargs):
        time.sleep(0.5)
        return subscribe(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.PubSub, "psubscribe", late)
    task, lease = claimed(engine)
    with sleeping_sweeper(engine):  # its first look saw only this lease (30 s away)
        engine.fail(lease, "boom", retry_in=0.2)
        wait_until(lambda: engine.get(task.id).status.value == "PENDING", 10, what="the retry promoted")
