"""The queue's per-state figures come from one counter per move ('<from>><to>' in its counts hash,
lua/lib/record.lua change; engine/core/stats.py state_counts), and add up with the per-state
counters a queue kept before them."""

from ghostless import State
from ghostless.core.stats import state_counts
from tests.support.snapshots import queue_snapshot


def test_each_move_counts_once_and_the_figures_are_sums_of_the_moves(engine):
    done = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    engine.submit("render", {"prompt": "a dog"}, owner="alice")
    engine.complete(engine.claim(done.id, "w1"), {"ok": True})
    counts = queue_snapshot(engine, "images")["counts"]
    assert {k: n for k, n in counts.items() if ">" in k} == {
        ">PENDING": 2,
        "PENDING>PROCESSING": 1,
        "PROCESSING>SUCCESS": 1,
    }
    figures = engine.stats()["images"]
    assert {s: n for s, n in figures["counts"].items() if n} == {"PENDING": 1, "SUCCESS": 1}
    assert {s: n for s, n in figures["entered"].items() if n} == {"PENDING": 2, "PROCESSING": 1, "SUCCESS": 1}
    assert {s: n for s, n in figures["left"].items() if n} == {"PENDING": 1, "PROCESSING": 1}
    assert engine.check() == []


def test_the_counters_of_a_queue_from_before_the_move_counters_still_count(engine):
    """An upgrade: the queue counted per state ('PENDING' in counts, 'entered:PENDING' and
    'tis_n:PENDING' in stats); the moves after it are counted on top."""
    first = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    engine.submit("render", {"prompt": "a dog"}, owner="alice")
    counts_key, stats_key = engine.keys.queue_key("images", "counts"), engine.keys.queue_key("images", "stats")
    engine.redis.hdel(counts_key, ">PENDING")  # as the release before wrote them
    engine.redis.hset(counts_key, "PENDING", 2)
    engine.redis.hset(stats_key, mapping={"entered:PENDING": 5, "tis_n:PENDING": 3})
    engine.complete(engine.claim(first.id, "w1"), {"ok": True})
    figures = engine.stats()["images"]
    assert (figures["counts"]["PENDING"], figures["counts"]["PROCESSING"], figures["counts"]["SUCCESS"]) == (1, 0, 1)
    assert (figures["entered"]["PENDING"], figures["entered"]["SUCCESS"]) == (5, 1)
    assert figures["left"]["PENDING"] == 4
    assert engine.check() == []


def test_a_purge_takes_the_task_out_of_its_state_count():
    # a field named after a state holds what no move counts: a purge's -1
    got = state_counts({">PENDING": 3, "PENDING>PROCESSING": 3, "PROCESSING>SUCCESS": 3, "SUCCESS": -2})
    assert (got["counts"][State.SUCCESS], got["counts"][State.PENDING], got["entered"][State.SUCCESS]) == (1, 0, 3)
    assert got["left"][State.PROCESSING] == 3


def test_fields_that_name_no_state_are_not_counted():
    got = state_counts({"dispatch_seq": 7, "front_seq": 2, "PENDING>QUEUED": 1, ">PENDING": 1})
    assert (got["counts"][State.PENDING], got["counts"][State.QUEUED]) == (0, 1)
