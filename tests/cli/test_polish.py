"""What a new user of the command line meets first: --version, -h, the environment variables in
--help, a bad --log-level, a --redis-url the app ignores, ``list``, ``user list --json``,
``scheduler --list`` without schedules, and bulk ``submit --from-file``."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from ghostless import State
from tests.cli.conftest import one_line_error


def test_version_and_short_help(cli):
    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"ghostless {version('ghostless')}"
    short, long = cli("-h"), cli("--help")
    assert short.exit_code == 0 and short.stdout == long.stdout and "list" in short.stdout
    assert cli("submit", "-h").stdout == cli("submit", "--help").stdout


def test_help_names_the_environment_variables(cli):
    for command in ("worker", "web", "sweeper", "show"):
        text = cli(command, "--help").stdout
        assert "GHOSTLESS_APP" in text and "GHOSTLESS_REDIS_URL" in text, command
    assert "GHOSTLESS_LOG_LEVEL" in cli("worker", "--help").stdout


@pytest.mark.parametrize("command", ["worker", "sweeper", "scheduler", "web"])
def test_a_bad_log_level_is_a_usage_error_naming_the_choices(cli, command):
    result = cli(command, "--app", "tests.apps.ops:engine", "--log-level", "LOUD")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for '--log-level'" in result.stderr and "debug" in result.stderr.lower()
    assert result.stderr.startswith(f"Usage: ghostless {command}")


def test_the_log_level_is_any_case(engine, cli, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_TEST_CRON", "")
    result = cli("scheduler", "--list", "--log-level", "debug")
    assert result.exit_code == 0, result.output


def test_a_redis_url_the_app_does_not_follow_is_named_in_a_warning(cli, redis_server, private_redis, monkeypatch):
    other = private_redis()
    monkeypatch.setenv("GHOSTLESS_TEST_FIXED_PORT", str(redis_server.port))
    result = cli("stats", "--app", "tests.apps.fixed:engine", "--redis-url", other.url)
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"127.0.0.1:{redis_server.port}/0" in warning[0] and other.url in warning[0]
    assert "Engine.from_url()" in warning[0]
    # The same address: no warning.
    followed = cli("stats", "--app", "tests.apps.fixed:engine", "--redis-url", redis_server.url)
    assert followed.exit_code == 0 and "warning" not in followed.stderr


def test_list_filters_and_pages(engine, cli):
    ids = [engine.submit("render", {"i": i}, owner="alice").id for i in range(3)]
    bob = engine.submit("quick", {}, owner="bob")
    engine.cancel(ids[0], by="alice")
    page = json.loads(cli("list", "--json").stdout)
    listed = [t["id"] for t in page["tasks"]]
    assert sorted(listed) == sorted([bob.id, *ids]) and page["next_cursor"] is None
    created = [t["created_at"] for t in page["tasks"]]
    assert created == sorted(created, reverse=True)  # newest first
    assert sorted(t["id"] for t in json.loads(cli("list", "--owner", "alice", "--json").stdout)["tasks"]) == sorted(ids)
    cancelled = json.loads(cli("list", "--status", "cancelled", "--json").stdout)["tasks"]
    assert [t["id"] for t in cancelled] == [ids[0]]
    assert [t["id"] for t in json.loads(cli("list", "--type", "quick", "--json").stdout)["tasks"]] == [bob.id]
    first = json.loads(cli("list", "--limit", "2", "--json").stdout)
    rest = json.loads(cli("list", "--limit", "2", "--cursor", first["next_cursor"], "--json").stdout)
    assert [t["id"] for t in first["tasks"] + rest["tasks"]] == listed
    table = cli("list", "--limit", "2")
    assert table.exit_code == 0 and listed[0] in table.stdout and "more: --cursor " in table.stdout
    assert "PENDING" in table.stdout.splitlines()[1]
    one_line_error(cli("list", "--cursor", "garbage"), 2, "cursor")
    assert cli("list", "--status", "NOPE").exit_code == 2


def test_user_list_json(engine, cli):
    engine.users.add("alice", admin=True)
    rows = json.loads(cli("user", "list", "--json").stdout)
    assert [(r["name"], r["admin"], r["tokens"]) for r in rows] == [("alice", True, 1)]


def test_scheduler_list_without_schedules_exits_zero(engine, cli, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_TEST_CRON", "")
    listed = cli("scheduler", "--list")
    assert listed.exit_code == 0 and "no periodic tasks" in listed.stdout
    assert json.loads(cli("scheduler", "--list", "--json").stdout) == []
    one_line_error(cli("scheduler", "--burst"), 2, "no periodic tasks")  # running one still needs a schedule


def test_submit_from_a_file_one_task_a_line_idempotent_by_line(engine, cli, tmp_path):
    lines = tmp_path / "tasks.jsonl"
    lines.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n{"prompt": "c"}\n')
    result = cli(
        "submit", "render", "--from-file", str(lines), "--owner", "alice", "--idempotency-key", "batch1", "--json"
    )
    assert result.exit_code == 0, result.output
    tasks = json.loads(result.stdout)
    assert [t["args"]["prompt"] for t in tasks] == ["a", "b", "c"] and {t["owner"] for t in tasks} == {"alice"}
    again = json.loads(
        cli(
            "submit", "render", "--from-file", str(lines), "--owner", "alice", "--idempotency-key", "batch1", "--json"
        ).stdout
    )
    assert [t["id"] for t in again] == [t["id"] for t in tasks]  # a re-run submits nothing twice
    assert len(engine.list_tasks()[0]) == 3
    plain = cli("submit", "render", "--from-file", str(lines))
    assert plain.exit_code == 0 and plain.stdout.count("submitted ") == 3


def test_submit_from_a_file_checks_every_line_first(engine, cli, tmp_path):
    lines = tmp_path / "tasks.jsonl"
    lines.write_text('{"prompt": "a"}\n[1, 2]\n')
    one_line_error(cli("submit", "render", "--from-file", str(lines)), 2, "line 2", "JSON object")
    assert engine.list_tasks()[0] == []  # nothing submitted
    one_line_error(cli("submit", "render", "--from-file", str(lines), "--args", '{"x": 1}'), 2, "not both")


def test_retry_failed_with_a_progress_bar_reopens_them_all(engine, cli):
    for i in range(3):
        task = engine.submit("render", {"i": i}, owner="alice")
        engine.fail(engine.claim(task.id, "w1"), "broken", "no", retryable=False)
    result = cli("retry-failed", "render")
    assert result.exit_code == 0 and "retried 3 render task(s)" in result.stdout
    assert "retrying 3 FAILED render" in result.stderr
    assert {t.status for t in engine.list_tasks()[0]} == {State.PENDING}
