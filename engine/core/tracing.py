"""Optional OpenTelemetry: a task's attempts join the trace of the code that submitted it.

ghostless never imports OpenTelemetry on its own: it takes part only once the application has
(``opentelemetry.trace`` is in ``sys.modules``: the app set up a tracer provider, or an
instrumentation did), so without the ``otel`` extra nothing is imported and nothing changes.

- ``Engine.submit`` (and ``AsyncEngine.submit``) runs in a span ``ghostless.submit <type>`` (kind PRODUCER); the W3C
  ``traceparent`` of that span is stored in the task's hash (field ``traceparent``, written by the
  submit script from what the engine passes: no caller sets it).
- Each attempt (engine/execution/runner.py) runs in a span ``ghostless.attempt <type>`` (kind
  CONSUMER) whose parent is that submit span, from the claim to the outcome: attributes
  ``ghostless.task_id``, ``ghostless.attempt``, ``ghostless.queue``, ``ghostless.worker`` and
  ``ghostless.outcome`` (complete, fail, release); a failed attempt's span has status ERROR.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from .keys import parse_task_id
from .text import text_or_none

TRACER = "ghostless"
F = TypeVar("F", bound=Callable[..., Any])


def _trace():
    """The ``opentelemetry.trace`` module when the application has imported it, else None."""
    return sys.modules.get("opentelemetry.trace")


def traceparent() -> str:
    """The W3C traceparent of the current span ('' when there is none, or no OpenTelemetry)."""
    if _trace() is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)  # nothing without a valid current span
    return carrier.get("traceparent", "")


def traced_submit(fn: F) -> F:
    """``Engine.submit`` (or ``AsyncEngine.submit``, awaited) in a span of its own (when the
    application traces)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def submit_async(engine, type, *args, **kwargs):
            with _submit_span(type) as span:
                task = await fn(engine, type, *args, **kwargs)
                _submitted(span, task)
                return task

        return cast(F, submit_async)

    @functools.wraps(fn)
    def submit(engine, type, *args, **kwargs):
        with _submit_span(type) as span:
            task = fn(engine, type, *args, **kwargs)
            _submitted(span, task)
            return task

    return cast(F, submit)


@contextmanager
def _submit_span(type_name: str):
    """The span ``ghostless.submit <type>`` as the current one (None without tracing)."""
    trace = _trace()
    if trace is None:
        yield None
        return
    with trace.get_tracer(TRACER).start_as_current_span(
        f"ghostless.submit {type_name}", kind=trace.SpanKind.PRODUCER, attributes={"ghostless.type": type_name}
    ) as span:
        yield span


def _submitted(span, task) -> None:
    if span is not None:
        span.set_attributes({"ghostless.task_id": task.id, "ghostless.queue": task.queue})


def warm() -> None:
    """Import now what an attempt's span needs, when the application traces: a fork worker calls
    this before it forks, or each work-horse would import it again for its one attempt (four files
    read and parsed a job, seen with strace; redis-py imports ``opentelemetry.trace`` itself, so
    every worker traces)."""
    if _trace() is not None:
        import opentelemetry.trace.propagation.tracecontext  # noqa: F401


@contextmanager
def attempt_span(engine, lease, flush: bool = False):
    """The span of one attempt, a child of its task's submit span (when the application traces).
    ``flush``: export it before returning (a forked work-horse exits without flushing)."""
    trace = _trace()
    if trace is None or (lease.traceparent == "" and _no_provider(trace)):
        # No provider set (redis-py imports the API in every process) and no parent to carry on: a
        # span would record nothing and hand the task's code no context. Not made: in a work-horse
        # it cost about 75 page copies, a quarter of a millisecond, every job (measured).
        yield None
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = lease.traceparent  # the claim brought it; a lease found otherwise reads it
    if parent is None:
        parent = text_or_none(engine.redis.hget(engine.keys.task(lease.task_id).task, "traceparent"))
    context = TraceContextTextMapPropagator().extract({"traceparent": parent}) if parent else None
    attributes = {
        "ghostless.task_id": lease.task_id,
        "ghostless.attempt": lease.attempt,
        "ghostless.queue": parse_task_id(lease.task_id) or "",
        "ghostless.type": lease.type,
        "ghostless.worker": lease.worker,
    }
    tracer = trace.get_tracer(TRACER)
    try:
        with tracer.start_as_current_span(
            f"ghostless.attempt {lease.type}", context=context, kind=trace.SpanKind.CONSUMER, attributes=attributes
        ) as span:
            yield span
    finally:
        if flush:
            getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()


def _no_provider(trace) -> bool:
    """No tracer provider set: the API's spans record nothing (a provider set later serves later
    spans: the proxy's)."""
    proxy = getattr(trace, "ProxyTracerProvider", ())  # an API without it: spans made, as before
    return isinstance(trace.get_tracer_provider(), proxy)


def outcome(verb: str, *args) -> None:
    """Record an attempt's reported outcome on the current span: ``complete``, ``fail`` (args:
    error kind, reason: the span's status is then ERROR) or ``release``."""
    trace = _trace()
    if trace is None:
        return
    span = trace.get_current_span()
    span.set_attribute("ghostless.outcome", verb)
    if verb == "fail":
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{args[0]}: {args[1]}" if len(args) > 1 else ""))
