"""ghostless reclaim / retry-failed / drain: the admin operations from the command line."""

import json

import pytest

from ghostless import State
from tests.cli.conftest import one_line_error


def test_reclaim_takes_a_running_task_back_and_runs_it_again(engine, cli):
    task = engine.submit("render", {}, owner="alice")
    engine.claim(task.id, "w1")
    result = cli("reclaim", task.id, "--by", "oncall")
    assert result.exit_code == 0, result.output
    assert "reclaimed" in result.stdout and engine.get(task.id).status in (State.PENDING, State.QUEUED)
    assert engine.get(task.id).reason == "reclaimed by oncall"


def test_reclaim_of_a_task_that_is_not_running_is_a_one_line_refusal(engine, cli):
    task = engine.submit("render", {}, owner="alice")
    one_line_error(cli("reclaim", task.id), 1, "refused")


def test_retry_failed_reopens_the_failed_tasks_of_a_type(engine, cli):
    for i in range(2):
        task = engine.submit("render", {"i": i}, owner="alice")
        engine.fail(engine.claim(task.id, "w1"), "broken", "no", retryable=False)
    result = cli("retry-failed", "render", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["retried"] == 2


def test_drain_and_resume_a_queue(engine, cli):
    queue = engine.registry.get("render").queue
    assert cli("drain", queue).exit_code == 0
    assert engine.draining() == [queue]
    assert cli("drain", queue, "--resume").exit_code == 0
    assert engine.draining() == []
    one_line_error(cli("drain", "no-such-queue"), 2, "no-such-queue")


def test_prune_scripts_deletes_other_releases_libraries(engine, cli):
    from ghostless.core.cluster import is_cluster

    if is_cluster(engine.redis):
        pytest.skip("one server is enough: the cluster case is tests/engine/test_functions.py's")
    engine.scripts.ensure_loaded()
    engine.redis.function_load(
        "#!lua name=gl_read_"
        + "1" * 16
        + "\nredis.register_function('gl_read_"
        + "1" * 16
        + "', function() return 1 end)"
    )
    result = cli("prune-scripts", "--json")
    assert result.exit_code == 0 and json.loads(result.output) == {"deleted": ["gl_read_" + "1" * 16]}
    assert "deleted 0 libraries" in cli("prune-scripts").output
