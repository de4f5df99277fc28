"""ghostless show ID: the task and its history."""

import json

from tests.cli.conftest import one_line_error


def test_show_prints_the_task_and_every_history_entry(engine, cli):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="req-1")
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    engine.progress(lease, 0.4, "step 2 of 5")
    result = cli("show", task.id)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fragment in (
        task.id,
        "PROCESSING  stage generating  progress 40%  'step 2 of 5'",
        "owner           alice",
        "attempt         1 of 3",
        "worker          w1",
        '{"prompt": "a cat"}',
        "req-1",
        "history (3 entries, oldest first)",
        "submit - -> PENDING",
        "claim PENDING -> PROCESSING",
        "stage generating",
    ):
        assert fragment in out, (fragment, out)


def test_show_json_has_the_task_and_its_history(engine, cli):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    engine.cancel(task.id, by="alice")
    shown = json.loads(cli("show", task.id, "--json").stdout)
    assert shown["task"]["id"] == task.id and shown["task"]["status"] == "CANCELLED"
    assert [(e["from"], e["to"], e["by"]) for e in shown["history"]] == [
        ("", "PENDING", "alice"),
        ("PENDING", "CANCELLED", "alice"),
    ]


def test_show_of_an_unknown_task_is_one_line_and_exit_1(engine, cli):
    one_line_error(cli("show", "images.0123456789abcdef0123"), 1, "task 'images.0123456789abcdef0123' not found")
    one_line_error(cli("show", "not-a-task-id"), 1, "not found")
