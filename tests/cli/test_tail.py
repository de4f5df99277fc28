"""ghostless tail [--since ID] [--task ID]: one line per event, live with XREAD BLOCK."""

import json
import os
import signal
import sys
import threading

import pytest

from ghostless.cli import tail as tail_mod
from tests.cli.conftest import one_line_error
from tests.support.procs import Proc
from tests.support.wait import server_ms, wait_for_server_time, wait_until


def test_tail_no_follow_prints_every_kept_event_in_order_across_queues(engine, cli):
    def next_ms():
        wait_for_server_time(engine.redis, server_ms(engine.redis))

    a = engine.submit("render", {"prompt": "a"}, owner="alice")
    next_ms()  # the streams order events by millisecond: across queues, a tie could go either way
    b = engine.submit("brief", {}, owner="bob")  # queue "other"
    next_ms()
    lease = engine.claim(a.id, "w1")
    engine.progress(lease, 0.5, "half way")
    engine.complete(lease, {"url": "x"})
    result = cli("tail", "--since", "0", "--no-follow")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split("  ")[1:4] for line in lines] == [
        [a.id, "render", "submit - -> PENDING"],
        [b.id, "brief", "submit - -> PENDING"],
        [a.id, "render", "claim PENDING -> PROCESSING"],
        [a.id, "render", "progress 50% half way"],
        [a.id, "render", "complete PROCESSING -> SUCCESS"],
    ]
    assert "worker=w1" in lines[2] and "by=bob" in lines[1]


def test_tail_task_json_prints_only_that_tasks_events_as_json_lines(engine, cli):
    a = engine.submit("render", {"prompt": "a"}, owner="alice")
    engine.submit("render", {"prompt": "b"}, owner="alice")
    engine.cancel(a.id, by="alice")
    result = cli("tail", "--since", "0", "--task", a.id, "--json")  # a is CANCELLED: no following
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["task_id"], e["kind"], e["to"]) for e in events] == [
        (a.id, "transition", "PENDING"),
        (a.id, "transition", "CANCELLED"),
    ]
    assert all(e["stream_id"] and e["queue"] == "images" for e in events)


def test_tail_follows_a_task_live_and_ends_after_its_terminal_state(engine, cli, monkeypatch):
    task = engine.submit("render", {"prompt": "a"}, owner="alice")
    following = threading.Event()
    events = tail_mod.Tail.events

    def spy(self, follow=True):
        following.set()  # the tail's start position is fixed: what happens from here on is printed
        return events(self, follow)

    monkeypatch.setattr(tail_mod.Tail, "events", spy)

    def work():
        assert following.wait(10)
        lease = engine.claim(task.id, "w1")
        engine.stage(lease, "generating")
        engine.complete(lease, {"url": "x"})

    worker = threading.Thread(target=work)
    worker.start()
    result = cli("tail", "--task", task.id)
    worker.join(10)
    assert result.exit_code == 0, result.output
    assert [line.split("  ")[3] for line in result.stdout.splitlines()] == [
        "claim PENDING -> PROCESSING",
        "stage generating",
        "complete PROCESSING -> SUCCESS",
    ]
    assert f"following task {task.id} from now (Ctrl-C to stop)" in result.stderr


def test_tail_refuses_a_malformed_since_and_an_unknown_task(engine, cli):
    for since in ("yesterday", "99999999999999999999999", "\u00b2"):  # too big for a stream id; not ASCII
        one_line_error(cli("tail", "--since", since, "--no-follow"), 2, "--since must be $, 0 or a stream id")
    one_line_error(cli("tail", "--task", "images.0123456789abcdef0123"), 1, "not found")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["real"], indirect=True)  # another process: a real redis-server
def test_tail_process_prints_events_live_and_ctrl_c_ends_it_cleanly(engine):
    tail = Proc([sys.executable, "-m", "ghostless", "tail"], {**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until(lambda: "following 2 queue(s) from now" in tail.output(), what="the tail to start")
        task = engine.submit("render", {"prompt": "live"}, owner="alice")
        wait_until(lambda: f"{task.id}  render  submit - -> PENDING" in tail.output(), what="the live event")
        tail.signal(signal.SIGINT)
        assert tail.popen.wait(10) == 0, tail.output()
        assert "Traceback" not in tail.output()
    finally:
        tail.stop()


@pytest.mark.slow
def test_tail_follows_queues_on_different_shards_of_a_cluster(redis_cluster):
    # One XREAD over two queues' streams is refused on a cluster (CROSSSLOT): it polls there.
    from ghostless import Engine
    from tests.conftest import register_test_types

    redis_cluster.flushall()
    engine = register_test_types(Engine.from_url(redis_cluster.url, namespace="t", dispatcher=None))
    events = tail_mod.Tail(engine, block_ms=200).events()
    image, brief = engine.submit("render", {}, owner="alice"), engine.submit("brief", {}, owner="alice")
    assert sorted(next(events)["task_id"] for _ in range(2)) == sorted([image.id, brief.id])
    engine.redis.close()
