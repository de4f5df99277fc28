"""RQ jobs enqueued before the move name engine.runner.run_task; the worker still runs them."""

from rq.utils import import_attribute

import ghostless.execution.worker  # noqa: F401  what a worker process imports before it dequeues
from ghostless.execution.rq_dispatch import JOB_FUNC
from ghostless.execution.runner import run_task


def test_new_jobs_name_the_new_path():
    assert JOB_FUNC == "ghostless.execution.runner.run_task"
    assert import_attribute(JOB_FUNC) is run_task


def test_jobs_already_in_redis_still_find_run_task():
    assert import_attribute("engine.runner.run_task") is run_task
