"""Start-up checks of persistence (engine/core/server.py): what a Redis crash would lose, said plainly."""

import logging

import fakeredis
import pytest

from ghostless import Engine
from ghostless.core.server import persistence_notes


def test_aof_off_warns_that_a_crash_loses_every_task(private_redis, caplog):
    server = private_redis()  # appendonly no, save "": nothing survives a restart
    with caplog.at_level(logging.INFO, logger="ghostless"):
        Engine(server.client(), dispatcher=None)
    [record] = [r for r in caplog.records if "AOF" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "Redis AOF is off" in record.getMessage() and "loses every task" in record.getMessage()


def test_aof_off_with_snapshots_names_what_is_lost_since_the_last_one(private_redis):
    server = private_redis("--save", "900 1")
    [(level, message)] = persistence_notes(server.client())
    assert level == logging.WARNING
    assert "every transition since the last RDB snapshot (snapshot rule 'save 900 1'" in message


@pytest.mark.parametrize(
    "fsync, level, fragment",
    [
        ("everysec", logging.INFO, "may lose up to about 1 s of acknowledged transitions"),
        ("always", logging.INFO, "every acknowledged transition survives a crash"),
        ("no", logging.WARNING, "the OS decides when to write"),
    ],
)
def test_aof_on_tells_what_each_appendfsync_loses(private_redis, fsync, level, fragment):
    server = private_redis(appendonly=True, appendfsync=fsync)
    [(got_level, message)] = persistence_notes(server.client())
    assert got_level == level and f"appendfsync {fsync}" in message and fragment in message


def test_a_server_that_refuses_info_is_reported_as_unverified():
    [(level, message)] = persistence_notes(fakeredis.FakeRedis())
    assert level == logging.INFO and "persistence not verified" in message
