"""The data epoch (engine/core/epoch.py): a Redis that lost its data is noticed, a brand-new one is not
an alarm. Losses are played by a private redis-server restarted without persistence."""

import logging
import threading

import pytest

from ghostless import Engine
from ghostless.core import epoch
from ghostless.core.sweep import run_sweeper
from tests.conftest import register_test_types
from tests.support.wait import wait_until


def new_engine(client):
    return register_test_types(Engine(client, namespace="t", dispatcher=None))


@pytest.fixture
def server(private_redis):
    return private_redis()  # AOF and RDB off: a restart loses everything


def test_a_brand_new_redis_is_not_an_alarm_and_its_first_use_writes_the_marker(redis_client):
    first, second = new_engine(redis_client), new_engine(redis_client)
    assert redis_client.exists(first.keys.data_epoch()) == 0
    first.submit("render", {"prompt": "a cat"}, owner="alice")
    assert redis_client.exists(first.keys.data_epoch()) == 1
    assert first.data_epoch.verify() is None
    assert second.data_epoch.adopt() == first.data_epoch.seen
    assert second.data_epoch.verify() is None and first.data_epoch.problem(first.queues()) is None


def test_a_marker_replaced_after_a_flush_is_a_loss_for_a_process_that_saw_the_old_one(redis_client, caplog):
    before = new_engine(redis_client)
    before.submit("render", {"prompt": "a cat"}, owner="alice")
    redis_client.flushall()
    after = new_engine(redis_client)
    after.submit("render", {"prompt": "a dog"}, owner="alice")  # a process started after the loss
    with caplog.at_level(logging.ERROR, logger="ghostless"):
        assert "changed since this process started" in before.data_epoch.verify()
    assert after.data_epoch.verify() is None  # it cannot tell: documented
    assert [r.levelname for r in caplog.records if "lost its data" in r.getMessage()] == ["ERROR"]
    before.data_epoch.verify()
    assert len([r for r in caplog.records if "lost its data" in r.getMessage()]) == 1  # once per change


def test_a_process_that_saw_the_marker_notices_a_restart_without_persistence(server):
    engine = new_engine(server.client())
    engine.submit("render", {"prompt": "a cat"}, owner="alice")
    assert engine.data_epoch.verify() is None
    server.restart()
    assert "is gone since this process started" in engine.data_epoch.verify()
    engine.submit("render", {"prompt": "a dog"}, owner="alice")  # a submit does not paper over it
    assert engine.data_epoch.verify() is not None
    assert engine.redis.exists(engine.keys.data_epoch()) == 0


def test_the_sweeper_logs_an_error_when_redis_loses_its_data_under_it(server, monkeypatch, caplog):
    monkeypatch.setattr(epoch, "WATCH_INTERVAL", 0.02)
    engine = new_engine(server.client(socket_timeout=5))
    stop = threading.Event()
    sweeper = threading.Thread(target=run_sweeper, args=(engine,), kwargs={"interval": 0.05, "stop": stop})
    with caplog.at_level(logging.ERROR, logger="ghostless"):
        sweeper.start()
        try:
            wait_until(lambda: engine.data_epoch.seen, 10, what="the sweeper adopting the epoch")
            server.restart()
            wait_until(
                lambda: any("Redis lost its data" in r.getMessage() for r in caplog.records),
                10,
                what="the sweeper's error",
            )
        finally:
            stop.set()
            sweeper.join(10)
    assert engine.data_epoch.lost


def test_check_reports_a_redis_without_the_marker_while_queues_exist(redis_client):
    engine = new_engine(redis_client)
    assert "no ghostless data marker" in engine.data_epoch.problem(engine.queues())
    assert engine.data_epoch.problem([]) is None
