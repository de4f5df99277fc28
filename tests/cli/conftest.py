"""Fixtures for the operator CLI tests: the app ``tests.apps.ops:engine`` on fakeredis and on a
private redis-server, an engine of the test's own on the same data, and ``cli(...)`` to run
a command in-process with click's CliRunner.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ghostless.cli.root import main
from tests.apps import ops


@pytest.fixture(params=["fake", "real"])
def engine(request, monkeypatch):
    """The test's engine on the same Redis and namespace as the commands' app."""
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.ops:engine")
    monkeypatch.setenv("GHOSTLESS_TEST_NS", ops.NAMESPACE)
    if request.param == "fake":
        monkeypatch.setenv("GHOSTLESS_TEST_FAKE", "1")
        monkeypatch.delenv("GHOSTLESS_REDIS_URL", raising=False)
        import fakeredis

        client = fakeredis.FakeRedis(server=ops.FAKE)
    else:
        server = request.getfixturevalue("redis_server")
        monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
        monkeypatch.setenv("GHOSTLESS_REDIS_URL", server.url)
        client = server.client()
    client.flushall()
    yield ops.build(client)
    client.close()


@pytest.fixture
def cli():
    """``cli("show", task_id)`` -> click's Result (stdout, stderr, exit_code)."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


def one_line_error(result, code: int, *fragments: str) -> None:
    """The command failed with ``code`` and exactly one line on stderr naming every fragment."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
