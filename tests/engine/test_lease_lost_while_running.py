"""An attempt whose lease is taken while its function runs (engine/execution/runner.py: execute):
the function's next engine call raises LeaseLost, and the attempt ends there, quietly, reporting
no outcome over whatever the task has become since."""

import logging

from ghostless import LeaseLost, State
from ghostless.execution.runner import execute


def test_a_task_whose_lease_was_reclaimed_mid_run_ends_without_an_outcome(engine, caplog):
    seen = []

    @engine.task(name="slow_report", queue="images", lease=30, max_attempts=3)
    def slow_report(ctx):
        engine.reclaim(ctx.task_id, by="admin")  # an operator takes the task while it runs
        try:
            ctx.progress(0.5, "half way")
        except LeaseLost as e:
            seen.append(e)
            raise
        return {"done": True}

    task = engine.submit("slow_report", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    with caplog.at_level(logging.WARNING, logger="ghostless.runner"):
        execute(engine, lease)

    assert len(seen) == 1  # the progress call was refused: the lease had gone
    assert any("lost its lease while running" in r.getMessage() for r in caplog.records)
    assert not any("outcome of task" in r.getMessage() for r in caplog.records)  # no refused report
    done = engine.get(task.id)
    assert (done.status, done.attempt, done.result) == (State.PENDING, 1, None)  # retried at once
    verbs = [e.verb for e in engine.history(task.id)]
    assert "expire" in verbs and not {"complete", "fail"} & set(verbs[verbs.index("expire") :])
    assert engine.check() == []
