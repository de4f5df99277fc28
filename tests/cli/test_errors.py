"""Every operator command fails with one line, never a traceback: exit 2 for a bad argument or
app, exit 1 for an unreachable Redis."""

import pytest

from tests.cli.conftest import one_line_error

COMMANDS = [
    ["submit", "render"],
    ["show", "images.0123456789abcdef0123"],
    ["cancel", "images.0123456789abcdef0123"],
    ["edit", "images.0123456789abcdef0123", "--args", "{}"],
    ["retry", "images.0123456789abcdef0123"],
    ["tail", "--no-follow"],
    ["stats"],
    ["check"],
    ["scheduler", "--list"],
    ["prune-scripts"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_an_unreachable_redis_is_one_line_and_exit_1(cli, monkeypatch, args):
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.ops:engine")
    monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
    monkeypatch.setenv("GHOSTLESS_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    one_line_error(cli(*args), 1, "cannot reach Redis", "127.0.0.1:1")


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_missing_or_bad_app_is_one_line_and_exit_2(cli, monkeypatch, args):
    monkeypatch.delenv("GHOSTLESS_APP", raising=False)
    one_line_error(cli(*args), 2, "no app: pass --app")
    one_line_error(cli(*args, "--app", "tests.apps.no_such_module:engine"), 2, "cannot import app module")


def test_redis_url_option_names_the_redis(cli, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.ops:engine")
    monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
    monkeypatch.setenv("GHOSTLESS_REDIS_URL", "redis://127.0.0.1:6/0")  # restored after the test
    one_line_error(cli("stats", "--redis-url", "redis://127.0.0.1:2/0"), 1, "127.0.0.1:2")


@pytest.mark.parametrize("args", [("stats",), ("user", "list"), ("sweeper",), ("worker",)], ids=lambda a: a[0])
def test_a_malformed_redis_url_is_an_error_with_exit_2_never_a_traceback(cli, monkeypatch, args):
    # The app builds its engine from the URL as it is imported (Engine.from_url(), as in the README).
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.from_url:engine")
    monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
    result = cli(*args, "--redis-url", "redis//typo:6379")
    if args[0] == "stats":  # operator commands: one line
        one_line_error(result, 2, "Redis URL must specify")
    else:  # worker, sweeper, user: click's usage error, as for a missing app
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert result.stderr.strip().splitlines()[-1].startswith("Error: Redis URL must specify")
