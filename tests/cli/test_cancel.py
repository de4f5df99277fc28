"""ghostless cancel ID [--by NAME] [--reason TEXT]: as an admin, recorded in the history."""

import json

from ghostless import State
from tests.cli.conftest import one_line_error


def test_cancel_ends_another_owners_task_and_records_who(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    result = cli("cancel", task.id, "--by", "ops-oncall", "--reason", "runaway prompt")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"cancelled {task.id}: PENDING -> CANCELLED (by ops-oncall)"
    last = engine.history(task.id)[-1]
    assert (last.to, last.by, last.reason) == ("CANCELLED", "ops-oncall", "runaway prompt")


def test_cancel_defaults_to_by_cli_and_json_prints_the_task(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    engine.claim(task.id, "w1")
    shown = json.loads(cli("cancel", task.id, "--json").stdout)
    assert shown["status"] == "CANCELLED"
    assert engine.history(task.id)[-1].by == "cli"
    assert cli("cancel", task.id).stdout.strip() == f"{task.id} was already CANCELLED"


def test_cancel_of_a_finished_task_is_refused_with_exit_1(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    engine.complete(engine.claim(task.id, "w1"), {"url": "x"})
    one_line_error(cli("cancel", task.id), 1, "refused", "SUCCESS")
    assert engine.get(task.id).status == State.SUCCESS
    one_line_error(cli("cancel", "images.0123456789abcdef0123"), 1, "not found")
