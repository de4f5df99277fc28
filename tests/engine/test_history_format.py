"""A task's history as Redis stores it (lua/lib/record.lua ``emit``): compact entries, the fields of
HISTORY_LAYOUT by position and the others as ``<short name>=<value>``, joined by ``|`` (a realistic
lifecycle's history takes 40 % less memory than as JSON objects, bench/sweep.py); entries written
before as JSON objects, under the short or the long names, read the same."""

import json

import pytest

from ghostless import LeaseLost
from ghostless.core.keys import BODY_HISTORY
from ghostless.core.models import HISTORY_LAYOUT, HISTORY_NAMES, IMPLIED, history_entry
from tests.support.snapshots import reclaimed


def lived(engine):
    """A task with every kind of history entry: transitions, stages (one with from_stage), a stale
    call refused (with its token), a release and a success."""
    task, stale, lease = reclaimed(engine)
    engine.stage(lease, "generating")
    engine.stage(lease, "uploading")
    engine.progress(lease, 0.5, "half")
    with pytest.raises(LeaseLost):  # refused: recorded as stale
        engine.complete(stale, {"url": "s3://late"})
    engine.complete(lease, {"url": "s3://cat"})
    return task


def stored(engine, task_id) -> list[str]:
    return [e.decode() for e in engine.redis.lrange(engine.keys.task(task_id).body, BODY_HISTORY, -1)]


def with_short_names(raw: str) -> str:
    """The entry as stored before the compact entries: a JSON object under the short names, no kind
    on a transition."""
    d = history_entry(raw)
    if d["kind"] == "transition":
        del d["kind"]
    return json.dumps({HISTORY_NAMES.get(k, k): v for k, v in d.items()})


def with_long_names(raw: str) -> str:
    """The entry as stored before the short names: long names, kind always there."""
    return json.dumps(history_entry(raw))


def test_entries_are_stored_by_position_with_the_other_fields_named(engine):
    task = lived(engine)
    entries = stored(engine, task.id)
    submit, claim = entries[0].split("|"), entries[1].split("|")
    # a verb's one source or target state is implied: submit -> PENDING, claim -> PROCESSING
    assert submit[1:5] == ["", "submit", "", ""] and submit[-1] == "b=alice"  # by: no position
    assert claim[1:8] == ["", "claim", "PENDING", "", "1", "w1", ""] and claim[8:] == ["n=1"]
    assert submit[0].isdigit() and submit[0] == engine.redis.hget(engine.keys.task(task.id).task, "created_at").decode()
    assert all(e.startswith("+") for e in entries[1:]) and int(claim[0][1:]) >= 0  # server ms since then
    kinds = [e.split("|")[1] for e in entries]
    assert kinds.count("stage") == 2 and kinds.count("stale") == 1 and "progress" not in kinds
    assert not any(e.startswith("{") for e in entries)
    last = entries[-1].split("|")
    # no empty tail; no worker: the claim entry of its attempt names it (test_history_left_out.py)
    assert last[1:] == ["", "complete", "", "", "1", "", "uploading"]
    transitions = [(e.verb, e.from_, e.to) for e in engine.history(task.id) if e.kind == "transition"]
    assert transitions == [
        ("submit", "", "PENDING"),
        ("claim", "PENDING", "PROCESSING"),
        ("release", "PROCESSING", "PENDING"),
        ("claim", "PENDING", "PROCESSING"),
        ("complete", "PROCESSING", "SUCCESS"),
    ]


def test_a_value_with_the_separator_or_a_backslash_reads_back_whole(engine):
    task, _stale, lease = reclaimed(engine)
    reason = r"upload failed | C:\tmp\x|y \| done="
    engine.release(lease, reason)
    entry = stored(engine, task.id)[-1]
    assert entry.endswith("r=" + reason.replace("\\", "\\\\").replace("|", "\\|"))
    assert engine.history(task.id)[-1].reason == reason
    assert len(engine.history(task.id)) == len(stored(engine, task.id))


def test_an_entry_written_as_json_reads_the_same(engine):
    task = lived(engine)
    key = engine.keys.task(task.id).body
    now = engine.history(task.id)
    assert [e.verb for e in now if e.kind == "transition"] == ["submit", "claim", "release", "claim", "complete"]
    assert [(e.kind, e.verb, e.extra["token"]) for e in now if e.kind == "stale"] == [("stale", "complete", 1)]
    assert [e.extra.get("from_stage") for e in now if e.kind == "stage"] == [None, "generating"]
    assert [e.attempt for e in now if e.kind == "transition"] == [0, 1, 1, 1, 1]
    for before in (with_short_names, with_long_names):
        old = [before(e) for e in stored(engine, task.id)]
        engine.redis.ltrim(key, 0, BODY_HISTORY - 1)
        engine.redis.rpush(key, *old)
        assert engine.history(task.id) == now


def test_the_layout_is_the_common_fields_of_every_entry():
    assert HISTORY_LAYOUT[:2] == ("at", "kind") and set(HISTORY_LAYOUT) <= set(HISTORY_NAMES)
    d = history_entry("1796446595850||claim|PENDING|PROCESSING|1|w1||n=1|custom=a=b")
    assert d == {
        "at": 1796446595850,
        "kind": "transition",
        "verb": "claim",
        "from": "PENDING",
        "to": "PROCESSING",
        "attempt": 1,
        "worker": "w1",
        "token": 1,
        "custom": "a=b",
    }
    assert history_entry("1796446595857|stage||||1|w1|render")["stage"] == "render"
    assert (history_entry("5||complete|||1|w1") | {"at": 0}) == {
        "at": 0,
        "kind": "transition",
        "verb": "complete",
        "from": "PROCESSING",
        "to": "SUCCESS",
        "attempt": 1,
        "worker": "w1",
    }
    # implied only where the verb has one: an expire's TIMEOUT -> RETRY_WAITING names both
    assert history_entry("5||expire|TIMEOUT|RETRY_WAITING|1")["from"] == "TIMEOUT"
    assert "to" not in history_entry("5||fail|||1|w1")  # RETRY_WAITING or FAILED: never left out
    stale = history_entry("5|stale|complete||||w1||n=1")  # a refused call: no move, nothing implied
    assert ("from" not in stale, "to" not in stale, stale["kind"]) == (True, True, "stale")


def test_the_implied_states_are_stored_data():
    """Entries already written leave these states out: changing one reads old entries wrongly."""
    assert IMPLIED == {
        "from": {
            "complete": "PROCESSING",
            "fail": "PROCESSING",
            "release": "PROCESSING",
            "expire": "PROCESSING",
            "promote": "RETRY_WAITING",
            "resolve": "PENDING",
        },
        "to": {
            "submit": "PENDING",
            "dispatch": "QUEUED",
            "claim": "PROCESSING",
            "complete": "SUCCESS",
            "release": "PENDING",
            "promote": "PENDING",
            "lapse": "CANCELLED",
            "cancel": "CANCELLED",
            "retry": "PENDING",
        },
    }


def test_a_stale_entrys_token_reads_as_a_number_in_both_formats():
    assert history_entry('{"k": "stale", "v": "complete", "n": "3", "t": 5}')["token"] == 3
    assert history_entry("5|stale|complete||||w1||n=3")["token"] == 3
