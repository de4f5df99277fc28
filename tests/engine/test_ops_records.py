"""What the operations features record: the sweeper registry (engine/core/sweepers.py), the wait
lines the oldest-task ages read (lib/record: wait_lines, checked by ``ghostless check``), and JSON
log lines (engine/core/logs.py)."""

from __future__ import annotations

import json
import logging

from ghostless.core.logs import JsonFormatter, for_task
from ghostless.core.sweepers import TickRecorder, freshest_age, record_tick, tick_ages
from tests.support.wait import server_ms, wait_for_server_time


def test_a_tick_is_recorded_in_redis_time(engine):
    before = server_ms(engine.redis)
    at = record_tick(engine, "box.7")
    assert before <= at <= server_ms(engine.redis)
    assert engine.redis.zscore(engine.keys.sweepers(), "box.7") == at
    assert set(tick_ages(engine)) == {"box.7"} and freshest_age(engine) < 1


def test_a_busy_sweeper_writes_the_registry_at_most_once_per_interval(engine):
    ticks = TickRecorder(engine, "box.8", every=3600)
    ticks.record()
    first = engine.redis.zscore(engine.keys.sweepers(), "box.8")
    engine.redis.zadd(engine.keys.sweepers(), {"box.8": 1})  # a second write would move it back
    ticks.record()
    assert first is not None and engine.redis.zscore(engine.keys.sweepers(), "box.8") == 1


def test_no_sweeper_listed_means_no_freshest_age(engine):
    assert tick_ages(engine) == {} and freshest_age(engine) is None


def test_check_reports_a_task_in_the_wait_line_of_another_state(engine):
    task = engine.submit("render", {}, owner="alice")
    assert engine.check() == []
    engine.claim(task.id, "w1")
    engine.redis.zadd(engine.keys.task(task.id).pending_since, {task.id: 1})
    assert engine.check() == [f"{task.id}: PROCESSING is in the pending_since line"]


def test_json_lines_carry_time_level_logger_message_and_the_task_fields():
    record = logging.LogRecord("ghostless.runner", logging.WARNING, __file__, 1, "task %s failed", ("t.1",), None)
    for key, v in for_task("images.0123", 2, worker=object()).items():
        setattr(record, key, v)
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "WARNING" and line["logger"] == "ghostless.runner"
    assert line["message"] == "task t.1 failed" and line["time"].endswith("+00:00")
    assert (line["task_id"], line["attempt"]) == ("images.0123", 2)
    assert line["worker"].startswith("<object")  # whatever it is, the line stays JSON


def test_a_json_line_holds_the_traceback_in_one_field():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = JsonFormatter().format(record)
    assert "\n" not in text and "ValueError: boom" in json.loads(text)["exception"]


def test_waiting_ages_and_histograms_read_every_queue_on_every_backend(engine):
    from ghostless.core.stats import histogram, waiting_ages

    waiting = engine.submit("render", {}, owner="alice")  # queue images
    brief = engine.submit("brief", {}, owner="alice")  # queue other
    engine.complete(engine.claim(brief.id, "w1"), {})
    wait_for_server_time(engine.redis, waiting.created_at * 1000 + 100)
    ages = waiting_ages(engine, ["images", "other"])
    assert ages["images"]["PENDING"] >= 0.1 and ages["images"]["QUEUED"] == 0
    assert ages["other"] == {"PENDING": 0.0, "QUEUED": 0.0}
    raw = {k.decode(): int(v) for k, v in engine.redis.hgetall(engine.keys.queue_key("other", "stats")).items()}
    buckets, _, count = histogram(raw, "run")
    assert count == 1 and buckets[-1] == (float("inf"), 1)
