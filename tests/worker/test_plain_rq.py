"""A ghostless worker that also serves plain RQ queues (``--rq-queue``): their jobs run exactly as
RQ runs them (RQ's serializer, results, failure registry, Retry, job.meta), beside ghostless tasks,
so one fleet runs both during a migration (docs/migrating.md)."""

from __future__ import annotations

import sys

import pytest
from rq import Queue, Retry, Worker
from rq.job import JobStatus
from rq.registry import FailedJobRegistry

from ghostless import State
from tests.apps import legacy_jobs
from tests.support.procs import Proc
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, wait_terminal

pytestmark = pytest.mark.slow


@pytest.fixture
def legacy(server):
    """The team's RQ queue ``legacy`` on the same Redis, with RQ's defaults (pickle)."""
    return Queue("legacy", connection=server.client())


@pytest.fixture
def both(procs):
    proc = Proc(
        [
            sys.executable,
            "worker.py",
            "--app",
            "tests.apps.basic:engine",
            "--rq-queue",
            "legacy",
            "--name",
            "both",
            "--log-level",
            "INFO",
        ],
        procs.env,
    )
    procs.started.append(proc)
    return proc


def _ended(job, timeout: float = 20.0):
    wait_until(lambda: job.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED), timeout, what=job.id)
    return job


def test_plain_rq_jobs_and_ghostless_tasks_run_in_one_worker(engine, legacy, both):
    job = legacy.enqueue(legacy_jobs.add, 2, 3)
    task = engine.submit("sleepy", {"seconds": 0.1}, owner=OWNER)
    assert _ended(job).get_status() == JobStatus.FINISHED
    assert job.latest_result().return_value == 5 and job.return_value() == 5
    assert wait_terminal(engine, task.id).status == State.SUCCESS
    assert engine.get(task.id).worker == "both"
    assert "both" in {w.name for w in Worker.all(queue=legacy)}  # `rq info` lists it on the queue
    assert engine.check() == []


def test_job_meta_progress_and_results_as_rq_keeps_them(legacy, both):
    job = _ended(legacy.enqueue(legacy_jobs.with_progress, 4))
    job.refresh()
    assert job.meta["progress"] == 1.0 and job.return_value() == {"done": 4}


def test_a_failing_job_lands_in_rqs_failed_registry_and_retry_runs_it_again(legacy, both, server):
    failing = _ended(legacy.enqueue(legacy_jobs.broken))
    assert failing.get_status() == JobStatus.FAILED
    assert failing.id in FailedJobRegistry(queue=legacy).get_job_ids()
    assert "legacy job failed on purpose" in failing.latest_result().exc_string
    flaky = legacy.enqueue(legacy_jobs.flaky, "flaky-runs", retry=Retry(max=1))
    wait_until(lambda: flaky.get_status(refresh=True) == JobStatus.FINISHED, 20, what="the retried job")
    assert flaky.return_value() == 2 and int(server.client().get("flaky-runs")) == 2


def test_bad_plain_queue_options_are_usage_errors(env, monkeypatch):
    from click.testing import CliRunner

    from ghostless.cli.root import main

    for name in ("GHOSTLESS_REDIS_URL", "GHOSTLESS_TEST_NS"):  # the test's private Redis, never a default
        monkeypatch.setenv(name, env[name])

    def run(*args):
        return CliRunner().invoke(main, ["worker", "--app", "tests.apps.basic:engine", "--burst", *args])

    own = run("--rq-queue", "wt.work@+1")
    assert own.exit_code == 2 and "not a plain RQ queue name" in own.stderr
    bad = run("--rq-queue", "legacy", "--rq-serializer", "no.such.Serializer")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_the_serializer_names_resolve_on_every_supported_rq():
    """RQ 2.x (the lowest supported) has no 'pickle'/'json' aliases: every worker refused to start."""
    from rq.serializers import DefaultSerializer, JSONSerializer

    from ghostless.execution.worker import plain_rq_serializer

    assert plain_rq_serializer("pickle") is DefaultSerializer and plain_rq_serializer("json") is JSONSerializer
    assert plain_rq_serializer("rq.serializers.JSONSerializer") is JSONSerializer
