"""Without OpenTelemetry (the ``otel`` extra not installed): tasks are submitted and run as ever,
and ghostless imports nothing of it (engine/core/tracing.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.procs import ROOT


def test_without_opentelemetry_nothing_is_imported_and_tasks_run():
    code = textwrap.dedent(
        """
        import sys

        class NoOtel:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("opentelemetry is not installed")

        sys.meta_path.insert(0, NoOtel())
        import fakeredis
        from ghostless import Engine
        from ghostless.execution.runner import execute
        import ghostless.web

        engine = Engine(fakeredis.FakeRedis(), namespace="t", dispatcher=None)
        engine.task(name="echo", queue="q")(lambda ctx, x: {"x": x})
        task = engine.submit("echo", {"x": 1}, owner="a")
        execute(engine, engine.claim(task.id, "w"), grace=1)
        assert engine.get(task.id).result == {"x": 1}
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
