"""``--log-format text|json`` (env GHOSTLESS_LOG_FORMAT) on every long-running command: listed in
``--help`` with its variable, a bad value a usage error naming the choices. The JSON lines the
commands print: tests/worker/test_log_format.py and tests/web/test_log_format.py."""

from __future__ import annotations

import pytest

LONG_RUNNING = ["worker", "sweeper", "scheduler", "web"]


@pytest.mark.parametrize("command", LONG_RUNNING)
def test_the_log_format_and_its_variable_are_in_the_help(cli, command):
    text = cli(command, "--help").stdout
    assert "--log-format [text|json]" in text and "GHOSTLESS_LOG_FORMAT" in text


@pytest.mark.parametrize("command", LONG_RUNNING)
def test_a_bad_log_format_is_a_usage_error_naming_the_choices(cli, command):
    result = cli(command, "--app", "tests.apps.ops:engine", "--log-format", "xml")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for '--log-format'" in result.stderr and "json" in result.stderr
