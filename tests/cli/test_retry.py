"""ghostless retry ID [--by NAME]: FAILED/TIMEOUT -> PENDING with fresh attempts, audited."""

import json

from ghostless import State
from tests.cli.conftest import one_line_error


def test_retry_reopens_a_failed_task_and_records_who(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    engine.fail(engine.claim(task.id, "w1"), "bad_prompt", "refused by policy")  # permanent for render
    assert engine.get(task.id).status == State.FAILED
    result = cli("retry", task.id, "--by", "root")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"retried {task.id}: FAILED -> PENDING (by root)"
    last = engine.history(task.id)[-1]
    assert (last.from_, last.to, last.by) == ("FAILED", "PENDING", "root")
    assert engine.claim(task.id, "w2").attempt == 1  # attempts start again


def test_retry_json_prints_the_reopened_task(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    engine.fail(engine.claim(task.id, "w1"), "bad_prompt")
    assert json.loads(cli("retry", task.id, "--json").stdout)["status"] == "PENDING"


def test_retry_of_a_task_that_has_not_failed_is_refused(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    one_line_error(cli("retry", task.id), 1, "refused", "cannot retry", "PENDING")
    one_line_error(cli("retry", "images.0123456789abcdef0123"), 1, "not found")
