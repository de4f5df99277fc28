"""Live status over SSE (web/sse.py on web/broker.py): snapshot first, one event per change,
resume with Last-Event-ID (exactly the missed events), the end after a terminal state, the
all-tasks feed with composite ids, and slow clients dropped without growth."""

from __future__ import annotations

import pytest

from ghostless import Config, State
from ghostless.web.positions import Positions
from ghostless.web.sse import task_stream
from tests.support.snapshots import sibling
from tests.support.wait import wait_until

from .helpers import task_in
from .sse_client import open_sse


def stream_ids(engine, queue="images"):
    return [sid.decode() for sid, _ in engine.redis.xrange(engine.keys.queue_key(queue, "events"))]


def test_a_task_stream_starts_with_a_snapshot_of_the_task_and_its_history(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    first = stream.next()
    assert first["event"] == "snapshot"
    assert first["id"] == stream_ids(engine)[-1]
    assert first["data"]["task"]["id"] == task.id and first["data"]["task"]["status"] == "PROCESSING"
    assert [e["to"] for e in first["data"]["history"]] == ["PENDING", "PROCESSING"]
    stream.close()


def test_each_change_is_one_event_with_its_stream_id_and_the_stream_ends_after_a_terminal_state(client, engine, auth):
    task = task_in(engine, State.PENDING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    assert stream.next()["event"] == "snapshot"
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    engine.progress(lease, 0.5, "half way")
    other = engine.submit("render", {"prompt": "other"}, owner="alice")  # not this task's
    engine.complete(lease, {"url": "s3://cat"})
    events = stream.rest()
    assert [(e["event"], e["data"].get("to"), e["data"].get("stage"), e["data"].get("progress")) for e in events] == [
        ("transition", "PROCESSING", None, None),
        ("stage", "", "generating", None),
        ("progress", "", "generating", 0.5),
        ("transition", "SUCCESS", "generating", None),
    ]
    assert all(e["data"]["task_id"] == task.id for e in events)
    assert [e["id"] for e in events] == [e["data"]["stream_id"] for e in events]
    assert [e["data"]["version"] for e in events] == [2, 3, 4, 5]
    assert stream.ended and other.id not in str(events)


def test_a_stream_of_an_ended_task_is_the_snapshot_alone(client, engine, auth):
    task = task_in(engine, State.FAILED)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    assert [e["event"] for e in stream.rest()] == ["snapshot"]


def test_an_edited_tasks_stream_ends_with_its_cancellation(client, engine, auth):
    task = task_in(engine, State.PENDING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    stream.next()
    new = engine.edit(task.id, {"prompt": "a dog"}, by="alice")
    [event] = stream.rest()
    assert (event["data"]["verb"], event["data"]["to"], event["data"]["reason"]) == (
        "edit",
        "CANCELLED",
        f"superseded by {new.id}",
    )


@pytest.mark.parametrize("how", ["header", "query"])
def test_resuming_with_last_event_id_replays_exactly_the_missed_events(client, engine, auth, how):
    task = task_in(engine, State.PENDING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    stream.next()
    lease = engine.claim(task.id, "w1")
    claim = stream.next()
    stream.close()
    # while disconnected:
    engine.stage(lease, "generating")
    engine.progress(lease, 0.25, "a quarter")
    engine.submit("render", {"prompt": "noise"}, owner="alice")
    missed = stream_ids(engine)[-3:-1]
    url = f"/api/tasks/{task.id}/events"
    if how == "header":
        stream = open_sse(client, url, headers={**auth["alice"], "Last-Event-ID": claim["id"]})
    else:
        stream = open_sse(client, f"{url}?last_event_id={claim['id']}", headers=auth["alice"])
    replayed = stream.take(2)
    assert [e["id"] for e in replayed] == missed
    assert [e["event"] for e in replayed] == ["stage", "progress"]
    engine.progress(lease, 0.5, "half way")  # live again
    engine.complete(lease, {})
    live = stream.rest()
    assert [(e["event"], e["data"].get("progress")) for e in live] == [("progress", 0.5), ("transition", None)]
    assert len({e["id"] for e in replayed + live}) == 4


def test_resuming_after_the_terminal_event_ends_at_once(client, engine, auth):
    task = task_in(engine, State.SUCCESS)
    last = stream_ids(engine)[-1]
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": last})
    assert stream.rest() == []


def test_resuming_before_the_terminal_event_replays_it_and_ends(client, engine, auth):
    task = task_in(engine, State.PENDING)
    submitted = stream_ids(engine)[-1]
    lease = engine.claim(task.id, "w1")
    engine.fail(lease, "boom", "broken", retryable=False)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": submitted})
    assert [e["data"]["to"] for e in stream.rest()] == ["PROCESSING", "FAILED"]


def test_resuming_after_events_were_trimmed_from_the_stream_starts_over_with_a_snapshot(make_app, engine, auth):
    small = sibling(engine, Config(stream_maxlen=3))  # Redis trims whole stream nodes (100 entries)
    client = make_app(GHOSTLESS_ENGINE=small).test_client()
    task = small.submit("render", {"prompt": "p"}, owner="alice")
    submitted = stream_ids(engine)[-1]
    for i in range(250):
        small.submit("render", {"prompt": str(i)}, owner="bob")
    assert stream_ids(engine)[0] > submitted
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": submitted})
    snapshot = stream.next()
    assert snapshot["event"] == "snapshot" and snapshot["data"]["task"]["id"] == task.id
    stream.close()


@pytest.mark.parametrize("bad", ["", "garbage", "1-2-3", "-1-0", "99999999999999999999999-0"])
def test_a_malformed_last_event_id_starts_over_with_a_snapshot(client, engine, auth, bad):
    task = task_in(engine, State.PENDING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": bad})
    assert stream.next()["event"] == "snapshot"
    stream.close()


def test_an_idle_stream_sends_keep_alive_comments(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    stream.next()
    assert stream.next_comment() == ": keep-alive"
    stream.close()


def test_a_stream_tells_the_browser_how_soon_to_reconnect(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    r = client.get(f"/api/tasks/{task.id}/events", headers=auth["alice"], buffered=False)
    assert next(iter(r.response)).decode().startswith("retry: 2000\n\n")  # before anything else
    assert r.headers["Cache-Control"] == "no-store" and r.headers["X-Accel-Buffering"] == "no"
    r.close()


def test_closing_a_stream_unsubscribes_it(app, client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    stream.next()
    broker = app.extensions["ghostless"].broker
    assert broker.subscribers() == 1
    stream.close()
    assert broker.subscribers() == 0


# -- the all-tasks feed ---------------------------------------------------------------------------
def test_the_feed_starts_ready_and_carries_events_of_every_queue_with_composite_ids(client, engine, auth):
    feed = open_sse(client, "/api/events", headers=auth["alice"])
    ready = feed.next()
    assert ready["event"] == "ready" and Positions.parse(ready["id"]).queues == {}
    image = engine.submit("render", {"prompt": "p"}, owner="alice")
    brief = engine.submit("brief", {}, owner="alice")
    events = sorted(feed.take(2), key=lambda e: e["data"]["queue"])
    feed.close()
    assert [(e["data"]["queue"], e["data"]["task_id"]) for e in events] == [("images", image.id), ("other", brief.id)]
    last = Positions.parse(max(events, key=lambda e: len(e["id"]))["id"])
    assert last.queues == {"images": stream_ids(engine, "images")[-1], "other": stream_ids(engine, "other")[-1]}


def test_resuming_the_feed_replays_exactly_the_missed_events_across_queues(client, engine, auth):
    feed = open_sse(client, "/api/events", headers=auth["alice"])
    feed.next()
    first = engine.submit("render", {"prompt": "1"}, owner="alice")
    seen = feed.next()
    assert seen["data"]["task_id"] == first.id
    feed.close()
    missed = [
        engine.submit("brief", {}, owner="alice").id,
        engine.submit("render", {"prompt": "2"}, owner="alice").id,
        engine.submit("brief", {}, owner="alice").id,
    ]
    engine.submit("render", {"prompt": "bob's"}, owner="bob")
    feed = open_sse(client, "/api/events", headers={**auth["alice"], "Last-Event-ID": seen["id"]})
    replayed = feed.take(3)
    assert sorted(e["data"]["task_id"] for e in replayed) == sorted(missed)
    live = engine.submit("brief", {}, owner="alice")
    assert feed.next()["data"]["task_id"] == live.id
    feed.close()


def test_a_position_past_every_event_starts_over_and_still_sees_the_end(client, engine, auth):
    # Not an id this server sent (or one Redis lost in a restart): resuming from it would skip
    # every event up to it, the terminal one included, and the stream would never end.
    task = task_in(engine, State.PENDING)
    end = f"{2**64 - 1}-{2**64 - 1}"
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": end})
    assert stream.next()["event"] == "snapshot"
    engine.complete(engine.claim(task.id, "w1"), {})
    assert [e["data"]["to"] for e in stream.rest()] == ["PROCESSING", "SUCCESS"]
    feed = open_sse(client, "/api/events", headers={**auth["alice"], "Last-Event-ID": f"0,images:{end}"})
    assert feed.next()["event"] == "ready"
    engine.submit("brief", {}, owner="alice")
    assert feed.next()["data"]["queue"] == "other"
    feed.close()


def test_a_malformed_feed_position_starts_a_fresh_feed(client, auth):
    feed = open_sse(client, "/api/events", headers={**auth["alice"], "Last-Event-ID": "images-123-0"})
    assert feed.next()["event"] == "ready"
    feed.close()


# -- slow clients ---------------------------------------------------------------------------------
def drain(sub) -> list[dict]:
    """Every event buffered for ``sub`` now."""
    out = []
    while (event := sub.next(0)) is not None:
        out.append(event)
    return out


def test_a_subscriber_that_never_reads_is_dropped_and_its_buffer_stays_bounded(make_app, engine):
    broker = make_app(GHOSTLESS_SSE_BUFFER=5).extensions["ghostless"].broker
    stalled = broker.subscribe(everything=True)
    reading = broker.subscribe(everything=True, limit=100)
    got = []
    for i in range(20):
        engine.submit("render", {"prompt": str(i)}, owner="alice")
        got += drain(reading)
        assert len(stalled) <= 5
    wait_until(lambda: got.extend(drain(reading)) or len(got) == 20, what="every event for the reader")
    assert stalled.dropped and len(stalled) == 5 and broker.subscribers() == 1
    assert len({e["stream_id"] for e in got}) == 20


def test_a_dropped_stream_ends_after_its_buffer_and_resumes_from_its_last_id(make_app, engine, auth):
    app = make_app(GHOSTLESS_SSE_BUFFER=3)
    client = app.test_client()
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    stream.next()
    broker = app.extensions["ghostless"].broker
    for i in range(1, 9):  # the client reads nothing meanwhile
        engine.progress(lease, i / 10, f"step {i}")
    wait_until(lambda: broker.subscribers() == 0, what="the slow stream dropped")
    buffered = stream.rest()
    assert len(buffered) == 3
    resumed = open_sse(
        client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": buffered[-1]["id"]}
    )
    rest = resumed.take(5)
    assert [e["data"]["progress"] for e in buffered + rest] == [i / 10 for i in range(1, 9)]
    resumed.close()


def test_the_stream_generator_unsubscribes_when_closed_before_it_ends(app, engine):
    task = task_in(engine, State.PROCESSING)
    broker = app.extensions["ghostless"].broker
    gen = task_stream(engine, broker, task.id, None, 0.05, 1000)
    assert next(gen).startswith(b"retry:") and broker.subscribers() == 1
    gen.close()
    assert broker.subscribers() == 0


def test_a_stream_ends_cleanly_when_redis_fails_mid_stream(app, client, engine, auth, monkeypatch):
    import redis

    import ghostless.web.sse

    task = task_in(engine, State.PROCESSING)
    opened = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth["alice"])
    first = opened.next()["id"]
    opened.close()
    task_in(engine, State.PENDING)  # the queue's stream moves on: the resume has events to read

    calls = []

    def unreachable(*args):
        calls.append(args)
        raise redis.ConnectionError("gone")

    # Opened (the snapshot read), then Redis fails while the stream replays after Last-Event-ID.
    monkeypatch.setattr(ghostless.web.sse.wq, "read_stream", unreachable)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": first})
    assert stream.rest() == [] and stream.ended and calls
    assert app.extensions["ghostless"].broker.subscribers() == 0


def test_an_idle_stream_waits_a_few_plain_calls_below_the_server_reading_it(app, engine, auth):
    """The server (gevent) keeps each waiting stream's stack for as long as it waits: the body is
    the server's iterator itself, with no generators nested under it, and a few calls deep."""
    import inspect
    import sys
    import threading

    from werkzeug.test import EnvironBuilder

    task = task_in(engine, State.PROCESSING)
    environ = EnvironBuilder(path=f"/api/tasks/{task.id}/events", headers=auth["alice"]).get_environ()
    body = app(environ, lambda status, headers, exc_info=None: None)
    got = []

    def server():  # what gunicorn does with the body
        for chunk in body:
            got.append(chunk)

    reader = threading.Thread(target=server)
    reader.start()
    broker = app.extensions["ghostless"].broker
    wait_until(lambda: b"event: snapshot" in b"".join(got), what="the snapshot")
    frames = []

    def waiting() -> bool:
        frame, frames[:] = sys._current_frames().get(reader.ident), []
        while frame is not None and frame.f_code is not server.__code__:
            frames.append(frame)
            frame = frame.f_back
        return any(f.f_code.co_name in ("acquire", "next") for f in frames)

    wait_until(waiting, what="the stream waiting for its next event")
    ours = [f for f in frames if "ghostless" in f.f_code.co_filename or "/web/" in f.f_code.co_filename]
    assert len(ours) <= 3, [f.f_code.co_name for f in frames]
    assert not any(f.f_code.co_flags & inspect.CO_GENERATOR for f in frames), [f.f_code.co_name for f in frames]
    engine.cancel(task.id, by="alice")
    reader.join(10)
    assert not reader.is_alive()  # the stream ended after the terminal event
    body.close()
    assert broker.subscribers() == 0


def test_a_stream_body_dropped_without_being_closed_still_lets_go_of_its_subscriber(app, engine):
    import gc

    task = task_in(engine, State.PROCESSING)
    broker = app.extensions["ghostless"].broker
    body = task_stream(engine, broker, task.id, None, 0.05, 1000)
    assert next(body).startswith(b"retry:") and broker.subscribers() == 1
    del body
    gc.collect()
    assert broker.subscribers() == 0
