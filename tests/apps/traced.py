"""tests.apps.basic's engine in an app that traces with OpenTelemetry (``--app
tests.apps.traced:engine``): its spans go, batched as a real exporter's would, to the file named by
GHOSTLESS_TEST_SPANS, one JSON object a line (tests/worker/test_tracing.py reads them)."""

from __future__ import annotations

import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from tests.apps import basic


class FileExporter(SpanExporter):
    def __init__(self, path: str):
        self.path = path

    def export(self, spans):
        with open(self.path, "a") as out:
            for s in spans:
                line = {
                    "name": s.name,
                    "trace_id": f"{s.context.trace_id:032x}",
                    "span_id": f"{s.context.span_id:016x}",
                    "parent_id": f"{s.parent.span_id:016x}" if s.parent else None,
                    "attributes": dict(s.attributes),
                    "status": s.status.status_code.name,
                    "pid": os.getpid(),
                }
                out.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
# A long batch delay by default: a fork worker's span reaches the file only because the work-horse
# flushes before it exits. GHOSTLESS_TEST_SPAN_DELAY_MS shortens it (a simple worker lives on).
delay = int(os.environ.get("GHOSTLESS_TEST_SPAN_DELAY_MS", "60000"))
exporter = FileExporter(os.environ["GHOSTLESS_TEST_SPANS"])
provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay))
trace.set_tracer_provider(provider)


def __getattr__(name: str):
    if name == "engine":
        return basic.app_engine()
    raise AttributeError(name)
