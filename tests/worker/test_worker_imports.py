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
