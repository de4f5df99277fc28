"""ghostless submit TYPE --args JSON [--owner] [--idempotency-key] [--priority] [--delay] [--expires-in]."""

import json

from ghostless import State
from tests.cli.conftest import one_line_error


def test_submit_creates_a_pending_task_and_prints_its_id(engine, cli):
    result = cli("submit", "render", "--args", '{"prompt": "a cat"}', "--owner", "alice")
    assert result.exit_code == 0, result.output
    task_id = result.stdout.split()[1]
    task = engine.get(task_id)
    assert (task.type, task.owner, task.args, task.status) == ("render", "alice", {"prompt": "a cat"}, State.PENDING)
    assert result.stdout.strip() == f"submitted {task_id} (render, PENDING, owner alice)"


def test_submit_json_prints_the_task_with_its_priority_and_delay(engine, cli):
    result = cli("submit", "render", "--args", '{"prompt": "p"}', "--priority", "5", "--delay", "60", "--json")
    assert result.exit_code == 0, result.output
    task = json.loads(result.stdout)
    assert (task["status"], task["priority"], task["owner"]) == ("PENDING", 5, "cli")
    assert engine.get(task["id"]).priority == 5


def test_submit_with_expires_in_gives_the_task_an_expiry(engine, cli):
    task = json.loads(cli("submit", "render", "--expires-in", "600", "--json").stdout)
    assert task["expires_at"] == engine.get(task["id"]).expires_at
    assert round(task["expires_at"] - task["created_at"], 3) == 600
    one_line_error(cli("submit", "render", "--expires-in", "0"), 2, "expires_in")
    assert "expires " in cli("show", task["id"]).stdout


def test_submit_with_the_same_idempotency_key_returns_the_same_task(engine, cli):
    first = json.loads(cli("submit", "render", "--args", '{"prompt": "p"}', "--idempotency-key", "k1", "--json").stdout)
    again = json.loads(cli("submit", "render", "--args", '{"prompt": "p"}', "--idempotency-key", "k1", "--json").stdout)
    assert first["id"] == again["id"]
    conflict = cli("submit", "render", "--args", '{"prompt": "other"}', "--idempotency-key", "k1")
    one_line_error(conflict, 1, "idempotency key 'k1'", first["id"])


def test_submit_refuses_bad_arguments_with_one_line_and_exit_2(engine, cli):
    one_line_error(cli("submit", "render", "--args", "{nope"), 2, "--args is not valid JSON")
    one_line_error(cli("submit", "render", "--args", "[1, 2]"), 2, "--args must be a JSON object")
    one_line_error(cli("submit", "no_such_type"), 2, "unknown task type 'no_such_type'")
    one_line_error(cli("submit", "render", "--priority", "9999999"), 2, "priority")
    one_line_error(cli("submit", "render", "--delay", "-1"), 2, "delay")
    assert engine.list_tasks()[0] == []
