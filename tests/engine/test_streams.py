"""Reading the queues' event streams (engine/core/streams.py), shared by the web and ``ghostless tail``."""

from __future__ import annotations

import dataclasses

import pytest

from ghostless.core.streams import (
    MAX_SEQ,
    STREAM_FIELDS,
    follow_streams,
    parse_stream_id,
    read_stream,
    stream_event,
    stream_may_be_trimmed,
)
from ghostless.core.text import text
from tests.support.snapshots import claimed


def add(engine, queue: str, stream_id: str, **fields) -> None:
    engine.redis.xadd(
        engine.keys.queue_key(queue, "events"),
        {"id": f"{queue}.x", "kind": "progress", "at": "1500", **fields},
        id=stream_id,
    )


@pytest.mark.parametrize(
    "value, want",
    [
        ("5-3", (5, 3)),
        (f"{MAX_SEQ}-{MAX_SEQ}", (MAX_SEQ, MAX_SEQ)),
        (f"{MAX_SEQ + 1}-0", None),
        ("5", None),
        ("5-3 ", None),
        (b"5-3", None),
        (None, None),
        ("-1-0", None),
    ],
)
def test_parse_stream_id(value, want):
    assert parse_stream_id(value) == want


def test_stream_event_decodes_fields_and_types_numbers():
    ev = stream_event(
        "images",
        b"7-1",
        {
            b"id": b"images.a",
            b"kind": b"progress",
            b"at": b"1500",
            b"progress": b"0.5",
            b"version": b"3",
            b"token": b"x",
            b"message": b"hi",
        },
    )
    assert ev == {
        "stream_id": "7-1",
        "queue": "images",
        "task_id": "images.a",
        "kind": "progress",
        "owner": "",
        "type": "",
        "at": 1.5,
        "from": "",
        "to": "",
        "progress": 0.5,
        "version": 3,
        "token": "x",
        "message": "hi",
    }


def test_read_stream_after_an_id_starts_at_the_next_one_even_at_the_largest_seq(engine):
    for sid in ("5-1", f"5-{MAX_SEQ}", "6-0"):
        add(engine, "images", sid)
    ids = lambda start: [ev["stream_id"] for ev in read_stream(engine, "images", start, batch=2)]  # noqa: E731
    assert ids("0") == ["5-1", f"5-{MAX_SEQ}", "6-0"]  # batches of 2 follow on
    assert ids("(5-1") == [f"5-{MAX_SEQ}", "6-0"]
    assert ids(f"(5-{MAX_SEQ}") == ["6-0"]
    assert ids(f"({MAX_SEQ}-{MAX_SEQ}") == []
    with pytest.raises(ValueError):
        list(read_stream(engine, "images", "(nonsense"))


def test_a_stream_at_its_cap_may_have_lost_what_came_after_an_older_id(engine, monkeypatch):
    monkeypatch.setattr(engine, "config", dataclasses.replace(engine.config, stream_maxlen=2))
    assert stream_may_be_trimmed(engine, "images", "0-0") is False  # empty: under its cap
    add(engine, "images", "5-0")
    add(engine, "images", "6-0")
    assert stream_may_be_trimmed(engine, "images", "4-9") is True
    assert stream_may_be_trimmed(engine, "images", "5-0") is False
    assert stream_may_be_trimmed(engine, "images", "junk") is True  # no position: assume the worst


def test_follow_streams_returns_the_entries_after_each_position_of_queues_on_any_shard(engine):
    add(engine, "images", "5-1")
    add(engine, "images", "5-2")
    add(engine, "other", "7-0")
    streams = {engine.keys.queue_key("images", "events"): "5-1", engine.keys.queue_key("other", "events"): "0-0"}
    moved = []
    parser = getattr(engine.redis, "commands_parser", None)
    if parser is not None:  # a cluster client: it must not ask a node for the keys of each read
        real = parser._get_moveable_keys
        parser._get_moveable_keys = lambda *a: moved.append(a) or real(*a)
    try:
        got = dict(follow_streams(engine.redis, streams, count=10, block_ms=100))
    finally:
        if parser is not None:
            del parser._get_moveable_keys
    assert {k: [text(sid) for sid, _ in rows] for k, rows in got.items()} == {
        engine.keys.queue_key("images", "events"): ["5-2"],
        engine.keys.queue_key("other", "events"): ["7-0"],
    }
    assert moved == []
    assert list(follow_streams(engine.redis, dict.fromkeys(streams, "9-0"), count=10, block_ms=50)) == []


def test_events_of_every_kind_share_one_field_layout_and_read_without_the_empty_ones(engine):
    """Redis stores a stream entry with its node's first entry's fields as values alone: every event
    has the same five fields (lua/lib/record.lua ``emit``), its own in one line, which took 30 % off
    an interleaved stream's entries (bench/sweep.py) and a tenth off a lifecycle's server time."""
    task, lease = claimed(engine)
    engine.stage(lease, "generating")
    engine.progress(lease, 0.5, "half | a \\ b")
    engine.complete(lease, {"url": "s3://cat"})
    rows = [
        f for _, f in engine.redis.xrange(engine.keys.queue_key(task.queue, "events")) if f[b"id"] == task.id.encode()
    ]
    assert all(tuple(f) == tuple(n.encode() for n in STREAM_FIELDS) for f in rows), [list(f) for f in rows]
    events = [stream_event(task.queue, "1-0", f) for f in rows]
    assert [e["kind"] for e in events] == ["transition", "transition", "stage", "progress", "transition"]
    submit, claim, stage, progress, done = events
    assert "worker" not in submit and "message" not in stage and "reason" not in done
    assert (claim["worker"], claim["token"], stage["stage"], progress["progress"], progress["message"]) == (
        "w1",
        1,
        "generating",
        0.5,
        "half | a \\ b",
    )
    assert (done["from"], done["to"], done["verb"]) == ("PROCESSING", "SUCCESS", "complete")
    assert (submit["from"], submit["to"], submit["version"], submit["owner"]) == ("", "PENDING", 1, task.owner)


def task_rows(engine, task) -> list[tuple]:
    key = engine.keys.queue_key(task.queue, "events")
    return [(text(sid), f) for sid, f in engine.redis.xrange(key) if f[b"id"] == task.id.encode()]


def test_an_event_line_leaves_its_time_to_its_entry_id(engine):
    """A stream entry's id is '<server ms>-<seq>' of the event (XADD '<ms>-*'), so its line has no
    time of its own: 13 B less in every entry of the stream."""
    task, lease = claimed(engine)
    engine.stage(lease, "generating")
    engine.complete(lease, {"url": "s3://cat"})
    rows = task_rows(engine, task)
    assert len(rows) == 4 and all(f[b"e"].startswith(b"|") for _, f in rows), rows
    times = [round(e.at * 1000) for e in engine.history(task.id)]
    assert [int(sid.split("-")[0]) for sid, _ in rows] == times
    assert [round(stream_event(task.queue, sid, f)["at"] * 1000) for sid, f in rows] == times


def test_an_event_after_a_later_stream_id_keeps_its_own_time(engine):
    """The stream's last id is later than the server's clock (a clock that went back, e.g. after a
    failover): Redis picks the entries' ids, and their lines keep the events' times."""
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    key = engine.keys.queue_key(task.queue, "events")
    later = int(engine.redis.hget(engine.keys.task(task.id).task, "created_at")) + 3_600_000
    engine.redis.xadd(key, dict.fromkeys(STREAM_FIELDS, "x"), id=f"{later}-0")
    lease = engine.claim(task.id, "w1")
    engine.complete(lease, {"url": "s3://cat"})
    rows = task_rows(engine, task)[1:]  # claim, complete: after the later id
    assert [sid.split("-")[0] for sid, _ in rows] == [str(later)] * 2
    times = [round(e.at * 1000) for e in engine.history(task.id)][1:]
    assert all(f[b"e"].startswith(str(t).encode() + b"|") for (_, f), t in zip(rows, times)), rows
    assert [round(stream_event(task.queue, sid, f)["at"] * 1000) for sid, f in rows] == times
    assert times[0] < later


#: One event of each kind as an earlier release wrote it (every field of its layout, '' where empty).
_OLD_LAYOUT = ("verb", "from", "to", "attempt", "stage", "worker", "reason", "by", "token", "from_stage", "progress",
               "message", "error_kind")  # fmt: skip


def _as_before(fields: dict, ev: dict) -> dict:
    """The entry an earlier release wrote for the event ``stream_event`` read from ``fields``."""
    old = {"id": ev["task_id"], "kind": ev["kind"], "owner": ev["owner"], "type": ev["type"],
           "version": ev["version"], "at": round(ev["at"] * 1000)}  # fmt: skip
    old.update({name: ev.get(name, "") for name in _OLD_LAYOUT})
    old.update({k: v for k, v in ev.items() if k not in old and k not in ("stream_id", "queue", "task_id")})
    return {k: str(v) for k, v in old.items()}


def test_an_entry_written_before_the_event_lines_reads_the_same(engine):
    """A rolling upgrade: the stream still holds entries with the event's fields as its own."""
    task, lease = claimed(engine)
    engine.stage(lease, "generating")
    engine.progress(lease, 0.25, "a quarter")
    engine.fail(lease, "bad_prompt", "no cats", retryable=False)
    key = engine.keys.queue_key(task.queue, "events")
    rows = [(sid, f) for sid, f in engine.redis.xrange(key) if f[b"id"] == task.id.encode()]
    assert len(rows) == 5  # submit, claim, stage, progress, fail
    for sid, fields in rows:
        ev = stream_event(task.queue, sid, fields)
        old_id = engine.redis.xadd(key, _as_before(fields, ev))
        assert stream_event(task.queue, sid, engine.redis.xrange(key, old_id, old_id)[0][1]) == ev


@pytest.mark.parametrize("token", ["²", "--5", "٣", "1-"])
def test_a_token_that_is_no_ascii_integer_reads_as_its_text_without_breaking_the_reader(token):
    """str.isdigit is true for "²" and "٣", which int() refuses: a stale call's token of that kind
    raised inside stream_event, in the one reader thread that serves every page of the queue."""
    line = history_text_of(kind="stale", verb="heartbeat", token=token)
    new = stream_event("q", "1-0", {b"id": b"q.1", b"owner": b"o", b"type": b"t", b"version": b"3", b"e": line})
    before = {b"id": b"q.1", b"kind": b"stale", b"owner": b"o", b"type": b"t", b"version": b"3", b"at": b"5000"}
    old = stream_event("q", "1-0", {**before, b"verb": b"heartbeat", b"token": token.encode()})
    assert new == old and new["token"] == token and new["version"] == 3


def history_text_of(kind: str, verb: str, token: str) -> bytes:
    """The event line lua/lib/record.lua writes for such an event (at 5000 ms; HISTORY_LAYOUT)."""
    return f"5000|{kind}|{verb}||||||n={token}".encode()
