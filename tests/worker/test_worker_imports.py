"""A worker process imports no part of the web app (web/__init__.py loads its names on first use):
RQ's fork worker copies the whole process for each attempt, and Flask, Jinja2 and the app made a
worker 13 MB bigger (49.5 MB against 41.7 MB RSS, bench app, fork class)."""

import subprocess
import sys

WEB_ONLY = ("flask", "jinja2", "werkzeug", "prometheus_client", "gevent", "ghostless.web.app")


def imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {WEB_ONLY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_the_worker_command_and_its_classes_import_no_web_module():
    assert imported_after("import ghostless.cli.root, ghostless.execution.worker") == []


def test_the_web_package_still_gives_its_names():
    assert {"flask", "ghostless.web.app"} <= set(imported_after("from ghostless.web import create_app, DEFAULTS"))
    assert imported_after("import ghostless.web\nassert not hasattr(ghostless.web, 'nothing')") == []


def test_a_worker_imports_what_an_attempts_span_needs_before_it_forks():
    # redis-py imports opentelemetry.trace itself, so every worker's attempts run in a span; a
    # work-horse would otherwise import the propagator for its one attempt (engine/core/tracing.py)
    code = (
        "import fakeredis\nfrom ghostless import Engine\nfrom ghostless.execution.worker import build_worker\n"
        "engine = Engine(fakeredis.FakeRedis(), namespace='imports')\n"
        "engine.task(name='noop', queue='q')(lambda ctx: None)\n"
        "import sys\nassert 'opentelemetry.trace.propagation.tracecontext' not in sys.modules\n"
        "build_worker(engine, ['q'], 'fork')\n"
        "print('opentelemetry.trace.propagation.tracecontext' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[-1:] == ["True"], out.stderr[-2000:]
