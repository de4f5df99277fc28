"""ghostless edit ID --args JSON [--by NAME]: the old task CANCELLED, a new one PENDING, linked."""

import json

from ghostless import State
from tests.cli.conftest import one_line_error


def test_edit_replaces_the_task_atomically_and_links_both(engine, cli):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    result = cli("edit", task.id, "--args", '{"prompt": "a dog"}', "--by", "root")
    assert result.exit_code == 0, result.output
    new_id = result.stdout.split("superseded by ")[1].split()[0]
    old, new = engine.get(task.id), engine.get(new_id)
    assert (old.status, old.superseded_by) == (State.CANCELLED, new_id)
    assert (new.status, new.supersedes, new.args, new.owner) == (State.PENDING, task.id, {"prompt": "a dog"}, "alice")
    assert engine.history(task.id)[-1].by == "root"


def test_edit_json_prints_old_and_new(engine, cli):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    out = json.loads(cli("edit", task.id, "--args", '{"prompt": "b"}', "--json").stdout)
    assert out["old"]["status"] == "CANCELLED" and out["new"]["args"] == {"prompt": "b"}
    assert out["old"]["superseded_by"] == out["new"]["id"]


def test_edit_refuses_bad_json_a_finished_task_and_an_unknown_one(engine, cli):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    one_line_error(cli("edit", task.id, "--args", "{oops"), 2, "--args is not valid JSON")
    one_line_error(cli("edit", task.id, "--args", "[" * 5000), 2, "--args is not valid JSON")  # nested too deep
    engine.cancel(task.id, by="alice")
    one_line_error(cli("edit", task.id, "--args", "{}"), 1, "refused", "CANCELLED")
    one_line_error(cli("edit", "images.0123456789abcdef0123", "--args", "{}"), 1, "not found")
    assert len(engine.list_tasks()[0]) == 1
