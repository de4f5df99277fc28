"""OpenTelemetry across processes: a real worker's attempt span joins the trace of the process that
submitted the task, through the traceparent the task carries; a fork worker's work-horse exports
its span before it exits (its batch would otherwise die with it)."""

from __future__ import annotations

import json

import pytest

from ghostless import State
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, wait_terminal

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

pytestmark = pytest.mark.slow


@pytest.fixture
def tracer():
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()  # the API sets a provider once per process
    trace.set_tracer_provider(TracerProvider())
    yield trace.get_tracer("test")
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()
    trace._TRACER_PROVIDER = None


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_the_workers_attempt_span_joins_the_submitters_trace(engine, procs, tracer, tmp_path, worker_class):
    spans = tmp_path / "spans.jsonl"
    delay = "60000" if worker_class == "fork" else "100"  # fork: exported only by the horse's flush
    procs.worker(
        worker_class,
        app="tests.apps.traced:engine",
        GHOSTLESS_TEST_SPANS=str(spans),
        GHOSTLESS_TEST_SPAN_DELAY_MS=delay,
    )
    with tracer.start_as_current_span("POST /images") as request:
        task = engine.submit("render", {"prompt": "cat", "steps": 1}, owner=OWNER)
    assert wait_terminal(engine, task.id).status == State.SUCCESS

    def attempt():
        lines = [json.loads(line) for line in spans.read_text().splitlines()] if spans.exists() else []
        return [s for s in lines if s["name"] == "ghostless.attempt render"]

    [span] = wait_until(attempt, timeout=20, what="the attempt's span exported")
    submit_id = engine.redis.hget(engine.keys.task(task.id).task, "traceparent").decode().split("-")[2]
    assert span["trace_id"] == f"{request.get_span_context().trace_id:032x}"
    assert span["parent_id"] == submit_id
    assert span["attributes"]["ghostless.task_id"] == task.id
    assert (span["attributes"]["ghostless.attempt"], span["attributes"]["ghostless.outcome"]) == (1, "complete")
