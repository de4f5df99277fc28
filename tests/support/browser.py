"""Headless Chromium (Debian's package) driven by Playwright, for the browser tests.

Never ``playwright install``: pip's playwright brings the driver, Debian brings the browser.
``need_browser()`` skips loudly without chromium or playwright, and fails instead when
REQUIRE_REAL_REDIS=1; ``browser_context()`` yields a context whose waits time out after WAIT_MS; ``served(app)``
serves a
Flask app with werkzeug in a thread on a free loopback port.
"""

from __future__ import annotations

import contextlib
import os
import threading

import pytest

from tests.conftest import REQUIRE_REAL

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-sync",
]
WAIT_MS = 10_000


def need_browser() -> None:
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -r requirements.txt)")
    if missing:
        msg = "browser tests need " + " and ".join(missing)
        if REQUIRE_REAL:
            pytest.fail(msg + " and REQUIRE_REAL_REDIS=1")
        pytest.skip("SKIPPED LOUDLY: " + msg)


@contextlib.contextmanager
def browser_context(wait_ms: int = WAIT_MS):
    from playwright.sync_api import sync_playwright

    need_browser()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        context = chromium.new_context(viewport={"width": 1100, "height": 900})
        context.set_default_timeout(wait_ms)
        try:
            yield context
        finally:
            context.close()
            chromium.close()


@contextlib.contextmanager
def served(app):
    """``app`` served by werkzeug (threaded) on a free loopback port: yields its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="browser-test-web", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
