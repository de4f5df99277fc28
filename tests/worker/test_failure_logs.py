"""What a worker's log says of a task's failed attempts: a line for each, the task's own traceback
(as RQ logs a job's) once it has failed for good, and none of the frames of the raise that tells
RQ the job failed."""

import pytest

from ghostless import State
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, wait_terminal

pytestmark = pytest.mark.slow

RQ_FAILED_JOB = "exception raised while executing"


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_failing_task_logs_its_retries_in_a_line_each_and_its_own_traceback_at_the_end(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    procs.sweeper()
    task = engine.submit("flaky", {"fail_times": 5}, owner=OWNER)  # 3 attempts: all fail (ConnectionError)

    assert wait_terminal(engine, task.id).status == State.FAILED
    out = wait_until(lambda: (o := worker.output()).count(RQ_FAILED_JOB) == 3 and o, what="RQ's log of the 3 jobs")

    lines = out.splitlines()
    for attempt in (1, 2, 3):
        [line] = [i for i, s in enumerate(lines) if f"runner WARNING task {task.id} attempt {attempt} failed:" in s]
        assert f"ConnectionError('upstream hiccup on attempt {attempt}')" in lines[line]
        assert not lines[line + 1].startswith("Traceback")
    [last] = [i for i, s in enumerate(lines) if f"runner ERROR task {task.id} failed for good at attempt 3:" in s]
    assert lines[last + 1] == "Traceback (most recent call last):"
    traceback = lines[last + 1 : lines.index("ConnectionError: upstream hiccup on attempt 3", last) + 1]
    assert any("tests/apps/basic.py" in s and "in flaky" in s for s in traceback)  # where the task raised
    assert out.count("Traceback (most recent call last):") == 1  # the task's, once
    assert ", in run_task" not in out and "runner.AttemptFailed: task" in out  # RQ's line, no frames
