"""A task's history as Redis stores it (lua/lib/record.lua ``emit``): short field names, no kind on
a transition, so a realistic lifecycle's history takes about a quarter less memory (bench/sweep.py);
entries written before, with the long names, read the same."""

import json

import pytest

from ghostless import LeaseLost
from ghostless.core.keys import BODY_HISTORY
from ghostless.core.models import HISTORY_NAMES, history_entry
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


def as_before(raw: bytes) -> str:
    """The entry as it was stored before the short names: long names, kind always there."""
    return json.dumps(history_entry(raw))


def test_entries_are_stored_under_the_short_names(engine):
    task = lived(engine)
    stored = [json.loads(e) for e in engine.redis.lrange(engine.keys.task(task.id).body, BODY_HISTORY, -1)]
    assert stored and all(set(e).isdisjoint(HISTORY_NAMES) for e in stored), stored  # no long name left
    kinds = [e.get(HISTORY_NAMES["kind"], "transition") for e in stored]
    assert kinds.count("stage") == 2 and kinds.count("stale") == 1 and "progress" not in kinds
    assert all(HISTORY_NAMES["kind"] not in e for e, k in zip(stored, kinds) if k == "transition")


def test_an_entry_written_with_the_long_names_reads_the_same(engine):
    task = lived(engine)
    key = engine.keys.task(task.id).body
    now = engine.history(task.id)
    assert [e.verb for e in now if e.kind == "transition"] == ["submit", "claim", "release", "claim", "complete"]
    assert [(e.kind, e.verb, str(e.extra["token"])) for e in now if e.kind == "stale"] == [("stale", "complete", "1")]
    assert [e.extra.get("from_stage") for e in now if e.kind == "stage"] == [None, "generating"]
    old = [as_before(e) for e in engine.redis.lrange(key, BODY_HISTORY, -1)]
    assert all('"kind"' in e and '"at"' in e for e in old)
    engine.redis.ltrim(key, 0, BODY_HISTORY - 1)
    engine.redis.rpush(key, *old)
    assert engine.history(task.id) == now
