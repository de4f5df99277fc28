"""OpenTelemetry (engine/core/tracing.py, the ``otel`` extra): the submit's span, its traceparent
carried in the task, each attempt's span joining the submitter's trace with its outcome; and
nothing imported or changed without it."""

from __future__ import annotations

import pytest

from ghostless import Backoff
from ghostless.core.tracing import attempt_span
from ghostless.execution.runner import execute
from tests.support.snapshots import raw_task
from tests.support.wait import wait_for_server_time

otel = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402


@pytest.fixture
def spans():
    """An SDK tracer provider exporting to memory for this test only (then the API's no-op again)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()  # the API sets a provider once per process
    trace.set_tracer_provider(provider)
    yield exporter
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def flaky(engine):
    calls = []

    @engine.task(name="flaky", queue="images", max_attempts=3, backoff=Backoff.fixed([0.05]))
    def run(ctx, **_):
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream hiccup")
        return {"ok": True}

    return calls


def named(exporter, prefix: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_submit_runs_in_a_span_whose_traceparent_the_task_carries(engine, spans):
    with trace.get_tracer("app").start_as_current_span("POST /images") as request:
        task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    [submit] = named(spans, "ghostless.submit")
    assert submit.name == "ghostless.submit render" and submit.kind == SpanKind.PRODUCER
    assert submit.parent.span_id == request.get_span_context().span_id
    assert submit.attributes["ghostless.task_id"] == task.id
    ctx = submit.get_span_context()
    version, trace_id, span_id, flags = raw_task(engine, task.id)["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


def test_each_attempt_is_a_span_in_the_submitters_trace_ending_with_its_outcome(engine, spans, flaky):
    with trace.get_tracer("app").start_as_current_span("POST /images"):
        task = engine.submit("flaky", {}, owner="alice")
    execute(engine, engine.claim(task.id, "w1"), grace=1)  # fails: RETRY_WAITING
    wait_for_server_time(engine.redis, engine.get(task.id).next_retry_at * 1000)
    assert engine.sweep().promoted == 1
    execute(engine, engine.claim(task.id, "w2"), grace=1)
    assert flaky == [1, 2]
    [submit] = named(spans, "ghostless.submit")
    first, second = named(spans, "ghostless.attempt")
    for span, attempt, worker in ((first, 1, "w1"), (second, 2, "w2")):
        assert span.name == "ghostless.attempt flaky" and span.kind == SpanKind.CONSUMER
        assert span.context.trace_id == submit.context.trace_id
        assert span.parent.span_id == submit.context.span_id
        assert (span.attributes["ghostless.attempt"], span.attributes["ghostless.worker"]) == (attempt, worker)
        assert span.attributes["ghostless.task_id"] == task.id
    assert (first.attributes["ghostless.outcome"], first.status.status_code) == ("fail", StatusCode.ERROR)
    assert "ConnectionError" in first.status.description
    assert (second.attributes["ghostless.outcome"], second.status.status_code) == ("complete", StatusCode.UNSET)


def test_a_task_submitted_outside_any_trace_carries_none_and_its_attempt_starts_one(engine, spans):
    task = engine.submit("render", {"prompt": "cat"}, owner="alice")  # the submit span is a root
    assert raw_task(engine, task.id)["traceparent"].startswith("00-")
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()
    trace._TRACER_PROVIDER = None  # no provider: the API's no-op spans have no context to carry
    untraced = engine.submit("render", {"prompt": "dog"}, owner="alice")
    assert "traceparent" not in raw_task(engine, untraced.id)


def test_an_async_submit_runs_in_a_span_whose_traceparent_the_task_carries(engine, spans):
    from tests.support.aio import run_async

    async def body(aengine):
        with trace.get_tracer("app").start_as_current_span("POST /images") as request:
            return request, await aengine.submit("render", {"prompt": "cat"}, owner="alice")

    request, task = run_async(engine, body)
    [submit] = named(spans, "ghostless.submit")
    assert submit.name == "ghostless.submit render" and submit.kind == SpanKind.PRODUCER
    assert submit.parent.span_id == request.get_span_context().span_id
    assert submit.attributes["ghostless.task_id"] == task.id
    ctx = submit.get_span_context()
    assert raw_task(engine, task.id)["traceparent"].split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]


def test_the_claim_brings_the_traceparent_so_an_attempt_span_costs_no_round_trip(engine, spans):
    with trace.get_tracer("app").start_as_current_span("POST /images"):
        task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    assert lease.traceparent == raw_task(engine, task.id)["traceparent"]
    sent = []
    real = engine.redis.hget
    engine.redis.hget = lambda *a, **kw: sent.append(a) or real(*a, **kw)
    with attempt_span(engine, lease):
        pass
    engine.redis.hget = real
    [submit] = named(spans, "ghostless.submit")
    [attempt] = named(spans, "ghostless.attempt")
    assert attempt.parent.span_id == submit.context.span_id and sent == []


@pytest.fixture
def no_provider():
    """The API imported (redis-py imports it in every process) and no provider set."""
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()
    trace._TRACER_PROVIDER = None


def test_with_no_provider_an_untraced_tasks_attempt_makes_no_span(engine, no_provider, monkeypatch):
    # It would record nothing and carry no context: in a fork worker's work-horse it cost ~0.25 ms a job
    task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    asked = []
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **kw: asked.append(a))
    with attempt_span(engine, lease) as span:
        assert span is None
    assert lease.traceparent == "" and asked == []


def test_with_no_provider_the_task_code_still_runs_in_its_submits_trace(engine, spans):
    with trace.get_tracer("app").start_as_current_span("POST /images") as request:
        task = engine.submit("render", {"prompt": "cat"}, owner="alice")
    trace._TRACER_PROVIDER_SET_ONCE = trace.Once()
    trace._TRACER_PROVIDER = None  # the worker's process traces nothing itself
    with attempt_span(engine, engine.claim(task.id, "w1")):
        inside = trace.get_current_span().get_span_context()  # what the task's own calls propagate
    assert inside.trace_id == request.get_span_context().trace_id
