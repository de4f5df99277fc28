"""Resuming task streams share their queue's replay (web/replay.py): every task's events after
its Last-Event-ID, exactly and in order, from one read of the queue's stream for all of them."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis

from ghostless import State
from ghostless.web import queries as wq
from ghostless.web.replay import Replays

from .helpers import task_in
from .sse_client import open_sse


def _newest(engine, queue: str = "images") -> str:
    last = engine.redis.xrevrange(engine.keys.queue_key(queue, "events"), count=1)
    return wq.text(last[0][0]) if last else "0-0"


def _id_of(message: str) -> str:
    return message.split("\n", 1)[0].removeprefix("id: ")


def _to(message: str) -> str:
    return json.loads(message.split("data: ", 1)[1])["to"]


def _own_events(engine, task_id: str, after: str, upto: str) -> list[str]:
    """What the old per-stream scan replayed: the task's events in the queue's stream, by id."""
    return [ev["stream_id"] for ev in wq.read_stream(engine, "images", f"({after}", upto) if ev["task_id"] == task_id]


def test_resumes_of_many_tasks_from_one_id_read_the_stream_once_and_each_gets_exactly_its_own(engine):
    tasks = [task_in(engine, State.PENDING) for _ in range(3)]
    before = _newest(engine)
    leases = [engine.claim(t.id, "w1") for t in tasks]
    engine.stage(leases[0], "generating")
    engine.complete(leases[1], {"ok": True})
    now = _newest(engine)
    replays = Replays(engine)
    got = [replays.messages("images", t.id, before, now) for t in tasks]
    assert [[_id_of(m) for m, _ in g] for g in got] == [_own_events(engine, t.id, before, now) for t in tasks]
    assert [[ends for _, ends in g] for g in got] == [[False, False], [False, True], [False]]  # SUCCESS ends one
    assert replays.reads == 1


def test_a_resume_from_further_back_or_up_to_a_newer_id_reads_only_what_the_span_lacks(engine):
    first = task_in(engine, State.PENDING)
    early = _newest(engine)
    second = task_in(engine, State.PENDING)
    middle = _newest(engine)
    replays = Replays(engine)
    assert replays.messages("images", second.id, middle, middle) == []
    assert [_to(m) for m, _ in replays.messages("images", second.id, early, middle)] == ["PENDING"]
    assert replays.reads == 1  # (early, middle]: read once
    engine.claim(first.id, "w1")
    late = _newest(engine)
    assert [_to(m) for m, _ in replays.messages("images", first.id, early, late)] == ["PROCESSING"]
    assert [_to(m) for m, _ in replays.messages("images", first.id, "0-0", late)] == ["PENDING", "PROCESSING"]
    assert replays.reads == 3  # (middle, late], then (0-0, early]
    assert [_id_of(m) for m, _ in replays.messages("images", first.id, "0-0", late)] == _own_events(
        engine, first.id, "0-0", late
    )


def test_a_span_older_than_keep_is_read_afresh(engine):
    task = task_in(engine, State.PENDING)
    now = _newest(engine)
    replays = Replays(engine, keep=0.0)
    for _ in range(2):
        assert [_to(m) for m, _ in replays.messages("images", task.id, "0-0", now)] == ["PENDING"]
    assert replays.reads == 2


def test_a_resume_between_ids_that_are_no_stream_ids_is_refused(engine):
    with pytest.raises(ValueError):
        Replays(engine).messages("images", "t1", "yesterday", "1-0")


def test_every_task_stream_of_a_process_resumes_through_its_one_replays(app, client, engine, auth):
    tasks = [task_in(engine, State.PENDING) for _ in range(2)]
    before = _newest(engine)
    for t in tasks:
        engine.claim(t.id, "w1")
    for t in tasks:
        stream = open_sse(client, f"/api/tasks/{t.id}/events", headers={**auth["alice"], "Last-Event-ID": before})
        ev = stream.next()
        assert (ev["event"], ev["data"]["task_id"], ev["data"]["to"]) == ("transition", t.id, "PROCESSING")
        stream.close()
    assert app.extensions["ghostless"].replays.reads == 1


def test_a_resume_from_further_back_than_a_trimmed_stream_reaches_gets_none_and_a_span_already_read_serves(engine):
    first = task_in(engine, State.PENDING)
    early = _newest(engine)
    task_in(engine, State.PENDING)
    now = _newest(engine)
    replays = Replays(engine)
    assert [_to(m) for m, _ in replays.messages("images", first.id, "0-0", now)] == ["PENDING"]
    engine.config = dataclasses.replace(engine.config, stream_maxlen=1)  # the stream is now past its cap
    engine.redis.xtrim(engine.keys.queue_key("images", "events"), maxlen=1, approximate=False)
    assert [_to(m) for m, _ in replays.messages("images", first.id, "0-0", now)] == ["PENDING"]  # read before
    assert Replays(engine).messages("images", first.id, early, now) is None  # a fresh span: may have lost some
    assert Replays(engine).messages("images", first.id, now, now) == []  # nothing after the newest


def test_a_span_whose_end_the_stream_trimmed_past_answers_none_and_starts_afresh(engine):
    engine.config = dataclasses.replace(engine.config, stream_maxlen=3)
    task = task_in(engine, State.PENDING)
    early = _newest(engine)
    lease = engine.claim(task.id, "w1")
    middle = _newest(engine)
    replays = Replays(engine)
    assert [_to(m) for m, _ in replays.messages("images", task.id, early, middle)] == ["PROCESSING"]
    engine.stage(lease, "generating")  # the event a resume from `middle` must not lose
    for _ in range(4):
        task_in(engine, State.PENDING)
    engine.redis.xtrim(engine.keys.queue_key("images", "events"), maxlen=3, approximate=False)
    assert replays.messages("images", task.id, middle, _newest(engine)) is None  # a snapshot instead
    assert replays._spans["images"].start is None  # nothing kept of what can no longer be whole


def test_a_failed_read_fails_the_resumes_waiting_on_it_and_the_next_one_reads_afresh(engine, monkeypatch):
    import ghostless.web.replay as replay

    task = task_in(engine, State.PENDING)
    now = _newest(engine)
    replays = Replays(engine)

    def down(*args):
        raise redis.ConnectionError("down")

    monkeypatch.setattr(replay.wq, "read_stream", down)
    with pytest.raises(redis.ConnectionError):
        replays.messages("images", task.id, "0-0", now)
    assert "images" not in replays._spans
    monkeypatch.undo()
    assert [_to(m) for m, _ in replays.messages("images", task.id, "0-0", now)] == ["PENDING"]


def test_a_resume_waits_a_bounded_time_for_a_span_another_is_reading(engine, monkeypatch):
    import ghostless.web.replay as replay

    monkeypatch.setattr(replay, "LOCK_WAIT", 0.05)
    task = task_in(engine, State.PENDING)
    replays = Replays(engine)
    span = replays._span("images")
    with span.lock, pytest.raises(redis.TimeoutError, match="busy"):
        replays.messages("images", task.id, "0-0", _newest(engine))


def test_a_last_event_id_older_than_its_task_gets_a_snapshot_without_reading_the_queue(app, client, engine, auth):
    task = task_in(engine, State.PENDING)
    stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": "1-0"})
    assert stream.next()["event"] == "snapshot"
    stream.close()
    assert app.extensions["ghostless"].replays.reads == 0
