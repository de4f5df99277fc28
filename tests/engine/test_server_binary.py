"""The suite's private servers run the server it was given: ``redis-server`` on the PATH, or the
binary ``GHOSTLESS_TEST_REDIS_SERVER`` names (``make check-valkey`` runs tests/engine on Valkey 8)."""

from __future__ import annotations

import os

import pytest

from tests.support.redis_server import SERVER_ENV, redis_server_path


def test_the_private_servers_run_the_binary_the_suite_was_given(redis_server):
    running = os.path.realpath(redis_server.client().info("server")["executable"])
    assert running == os.path.realpath(redis_server_path())
    if os.environ.get(SERVER_ENV):  # make check-valkey: the server it fetched, not the PATH's
        assert running == os.path.realpath(os.environ[SERVER_ENV])


def test_a_chosen_server_that_is_not_an_executable_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "no-such-server"))
    with pytest.raises(RuntimeError, match=SERVER_ENV):
        redis_server_path()


def test_a_chosen_server_named_relative_to_the_start_is_found_from_anywhere(monkeypatch, tmp_path):
    """docs name Valkey as ``.cache/valkey/...`` from the checkout: a server started by a process
    in another directory must still find it."""
    server = tmp_path / "bin" / "my-server"
    server.parent.mkdir()
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SERVER_ENV, "bin/my-server")
    found = redis_server_path()
    monkeypatch.chdir("/")
    assert found == str(server) and os.access(found, os.X_OK)
