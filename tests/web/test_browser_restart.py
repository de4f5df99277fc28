"""Task pages in a real browser through a web restart: nothing missed, nothing twice.

Three task pages (headless Chromium, tests/support/browser.py) watch three tasks served by a
real ``ghostless web`` (the default command line, gunicorn, on a private redis-server). The
web process is killed mid-task; transitions, stages and progress happen while it is down, it
starts again on the same port, more happen after. Every page must end showing every transition
in order with no duplicate (its timeline), without a reload; and its stream must have resumed
from Last-Event-ID (the missed events replayed, in order, each once, no second snapshot).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

from ghostless import Engine
from tests.conftest import register_test_types
from tests.support.browser import browser_context, need_browser, served
from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.web:engine"
NS = "tr"
# Records every event each EventSource of the page delivers: [kind, lastEventId, data].
RECORD_SSE = """(() => {
  const Real = window.EventSource;
  window.__sse = []; window.__opens = 0;
  window.EventSource = class extends Real {
    constructor(url, init) {
      super(url, init);
      this.addEventListener('open', () => { window.__opens += 1; });
      for (const kind of ['snapshot', 'transition', 'stage', 'progress', 'stale']) {
        this.addEventListener(kind, (m) => window.__sse.push([kind, m.lastEventId, m.data]));
      }
    }
  };
})();"""
RECONNECT_MS = 20_000  # waits that span a reconnection (EventSource retries after 2 s; the page reopens after 3-6 s)
TIMELINE = "[...document.querySelectorAll('.timeline li')].map(li => li.querySelector('span').textContent.trim())"


class Web:
    """``python -m ghostless web --app tests.apps.web:engine --port P``, startable again on P."""

    def __init__(self, redis_url: str):
        self.port, self.proc = free_port(), None
        self.env = {
            **os.environ,
            "GHOSTLESS_REDIS_URL": redis_url,
            "GHOSTLESS_TEST_NS": NS,
            "GHOSTLESS_SECRET_KEY": "restart-test",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
        for name in ("GHOSTLESS_TEST_FAKE", "GHOSTLESS_HELD_MAX"):
            self.env.pop(name, None)
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = Proc([sys.executable, "-m", "ghostless", "web", "--app", APP, "--port", str(self.port)], self.env)
        wait_until(lambda: self._healthz() or not self.proc.alive(), timeout=30, what="the web to answer")
        assert self.proc.alive(), self.proc.output()[-3000:]

    def kill(self) -> None:
        """SIGKILL the web (its gunicorn master and workers, by process group) and wait for the port to close."""
        self.proc.stop()
        wait_until(lambda: not self._healthz(), timeout=10, what="the web to be gone")

    def _healthz(self) -> bool:
        try:
            return urllib.request.urlopen(self.base + "/healthz", timeout=1).status == 200
        except (urllib.error.URLError, OSError):
            return False


@pytest.fixture
def engine(redis_server):
    """An engine (the test types, no executor) on the private redis-server, flushed."""
    need_browser()
    client = redis_server.client()
    client.flushall()
    yield register_test_types(Engine(client, namespace=NS, dispatcher=None))
    client.close()


@pytest.fixture
def web(redis_server, engine):
    server = Web(redis_server.url)
    server.start()
    yield server, engine
    server.proc.stop()


def happened(page) -> list[tuple]:
    """What the page's stream delivered after its first snapshot: (kind, what) in arrival order,
    and the SSE ids of all of them."""
    records = page.evaluate("window.__sse")
    assert records and records[0][0] == "snapshot", records[:2]
    out, ids = [], []
    for kind, sse_id, data in records[1:]:
        ev = json.loads(data)
        ids.append(sse_id)
        out.append(
            (
                kind,
                ev.get("to")
                if kind == "transition"
                else ev.get("stage")
                if kind == "stage"
                else ev.get("message")
                if kind == "progress"
                else ev,
            )
        )
    return out, ids


def settle(predicate, timeout: float = 10.0) -> None:
    """Wait until ``predicate()``; past the timeout go on: the assertion that follows says what differs."""
    with contextlib.suppress(AssertionError):
        wait_until(predicate, timeout=timeout, interval=0.05)


def stream_ids_in_order(ids: list[str]) -> bool:
    keys = [tuple(int(x) for x in i.split("-")) for i in ids]
    return keys == sorted(set(keys))  # increasing: in order, and each once


def test_task_pages_show_every_transition_they_missed_across_a_web_restart(web):
    from playwright.sync_api import expect

    server, engine = web
    token = engine.users.add("alice")
    tasks = [engine.submit("render", {"prompt": f"p{i}"}, owner="alice").id for i in range(3)]
    with browser_context() as browser:
        browser.add_init_script(RECORD_SSE)
        errors: list[str] = []
        login = browser.new_page()
        login.goto(server.base + "/login?next=/")
        login.fill("#token", token)
        login.click("button[type=submit]")
        expect(login.locator("h1")).to_have_text("Dashboard")
        login.close()
        pages = []
        for task_id in tasks:
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.base}/tasks/{task_id}")
            expect(page.locator("#live-dot")).to_have_text("live")
            expect(page.locator("#panel .headline")).to_have_text("Waiting to start")
            page.evaluate("window.__sameDocument = true")  # gone if the page ever reloads
            pages.append(page)

        leases = [engine.claim(task_id, "w1") for task_id in tasks]
        for lease in leases:
            engine.stage(lease, "generating")
        for page in pages:
            expect(page.locator("#panel .headline")).to_have_text("Generating")  # live before the restart

        server.kill()
        for page in pages:
            expect(page.locator("#live-dot")).not_to_have_text("live")  # each page saw its stream go
        # While the web is down: one task finishes, one fails and waits to retry, one moves on.
        engine.progress(leases[0], 0.5, "half way")
        engine.stage(leases[0], "uploading")
        engine.complete(leases[0], {"url": "https://example.invalid/p0.png"})
        engine.progress(leases[1], 0.25, "a quarter")
        engine.fail(leases[1], "upstream", "upstream hiccup")
        engine.progress(leases[2], 0.6, "more than half")
        engine.stage(leases[2], "uploading")

        server.start()  # the same port: every page's EventSource reconnects by itself
        expect(pages[0].locator("#panel .badge").first).to_have_text("SUCCESS", timeout=RECONNECT_MS)  # done while down
        for page in pages[1:]:
            expect(page.locator("#live-dot")).to_have_text("live", timeout=RECONNECT_MS)  # back: the rest arrives live
        engine.cancel(tasks[1], by="alice", reason="changed my mind")
        engine.complete(leases[2], {"url": "https://example.invalid/p2.png"})

        shown = {
            tasks[0]: [
                "SUCCESS",
                [
                    "new → PENDING",
                    "PENDING → PROCESSING",
                    "stage generating",
                    "stage uploading",
                    "PROCESSING → SUCCESS",
                ],
            ],
            tasks[1]: [
                "CANCELLED",
                [
                    "new → PENDING",
                    "PENDING → PROCESSING",
                    "stage generating",
                    "PROCESSING → RETRY_WAITING",
                    "RETRY_WAITING → CANCELLED",
                ],
            ],
            tasks[2]: [
                "SUCCESS",
                [
                    "new → PENDING",
                    "PENDING → PROCESSING",
                    "stage generating",
                    "stage uploading",
                    "PROCESSING → SUCCESS",
                ],
            ],
        }
        streamed = {
            tasks[0]: [
                ("transition", "PROCESSING"),
                ("stage", "generating"),
                ("progress", "half way"),
                ("stage", "uploading"),
                ("transition", "SUCCESS"),
            ],
            tasks[1]: [
                ("transition", "PROCESSING"),
                ("stage", "generating"),
                ("progress", "a quarter"),
                ("transition", "RETRY_WAITING"),
                ("transition", "CANCELLED"),
            ],
            tasks[2]: [
                ("transition", "PROCESSING"),
                ("stage", "generating"),
                ("progress", "more than half"),
                ("stage", "uploading"),
                ("transition", "SUCCESS"),
            ],
        }
        for task_id, page in zip(tasks, pages):
            status, timeline = shown[task_id]
            expect(page.locator("#panel .badge").first).to_have_text(status, timeout=RECONNECT_MS)
            # The timeline is newest first; oldest first it is every transition, in order, once.
            settle(lambda p=page, t=timeline: list(reversed(p.evaluate(TIMELINE))) == t)
            assert list(reversed(page.evaluate(TIMELINE))) == timeline
            assert page.evaluate("window.__sameDocument"), "the page reloaded"
            settle(lambda p=page, k=task_id: len(happened(p)[0]) >= len(streamed[k]))
            events, ids = happened(page)
            assert events == streamed[task_id]  # the missed ones replayed: no second snapshot, none twice
            assert stream_ids_in_order(ids), ids
            assert page.evaluate("window.__opens") >= 2  # it did reconnect
        assert errors == []


class Streams:
    """WSGI middleware over the app's ``/events`` streams: ``cut()`` ends every open one (at its next
    chunk: keep-alives come every 0.2 s here), as a web restart does; then the next ``refuse``
    stream requests are answered 503, as a web process out of Redis connections did (issue 12).
    An EventSource closes for good on a non-200: the page has to open a new one."""

    def __init__(self, app):
        self.app, self.refuse, self.generation = app, 0, 0
        self.requests: list[tuple[str, str, str]] = []  # (answer, query string, Last-Event-ID header)

    def cut(self, refuse: int) -> None:
        self.refuse, self.generation = refuse, self.generation + 1

    def __call__(self, environ, start_response):
        if not environ["PATH_INFO"].endswith("/events"):
            return self.app(environ, start_response)
        asked = (environ.get("QUERY_STRING", ""), environ.get("HTTP_LAST_EVENT_ID", ""))
        if self.refuse > 0:
            self.refuse -= 1
            self.requests.append(("503", *asked))
            start_response("503 Service Unavailable", [("Content-Type", "application/json")])
            return [b'{"error": {"code": "unavailable", "message": "Redis unavailable"}}']
        self.requests.append(("200", *asked))
        return self._until_cut(self.app(environ, start_response), self.generation)

    def _until_cut(self, body, generation: int):
        try:
            for chunk in body:
                if self.generation != generation:
                    return
                yield chunk
        finally:
            getattr(body, "close", lambda: None)()


@pytest.fixture
def cut_site(engine):
    """(base URL, engine, alice's token, the Streams middleware): the app served in a thread."""
    from ghostless.web import close_app, create_app

    token = engine.users.add("alice")
    app = create_app(
        {
            "GHOSTLESS_ENGINE": engine,
            "SECRET_KEY": "cut-test",
            "GHOSTLESS_BROKER_BLOCK_MS": 100,
            "GHOSTLESS_SSE_KEEPALIVE": 0.2,
        }
    )
    streams = Streams(app.wsgi_app)
    app.wsgi_app = streams
    with served(app) as base:
        yield base, engine, token, streams
    close_app(app)


def test_a_task_page_whose_reconnect_is_refused_opens_its_stream_again_and_misses_nothing(cut_site):
    from playwright.sync_api import expect

    base, engine, token, streams = cut_site
    task_id = engine.submit("render", {"prompt": "p"}, owner="alice").id
    with browser_context() as browser:
        browser.add_init_script(RECORD_SSE)
        page = browser.new_page()
        page.goto(f"{base}/login?next=/tasks/{task_id}")
        page.fill("#token", token)
        page.click("button[type=submit]")
        expect(page.locator("#live-dot")).to_have_text("live")
        page.evaluate("window.__sameDocument = true")
        lease = engine.claim(task_id, "w1")
        engine.stage(lease, "generating")
        expect(page.locator("#panel .headline")).to_have_text("Generating")
        last_id = page.evaluate("window.__sse[window.__sse.length - 1][1]")

        streams.cut(refuse=2)  # the stream ends; the browser's reconnect and the page's next try get 503
        expect(page.locator("#live-dot")).not_to_have_text("live")
        engine.progress(lease, 0.5, "while refused")
        engine.stage(lease, "uploading")
        settle(lambda: streams.refuse == 0, timeout=30)
        assert streams.refuse == 0, streams.requests  # both refusals: the page tried again after the first
        engine.complete(lease, {"url": "https://example.invalid/p.png"})

        expect(page.locator("#panel .badge").first).to_have_text("SUCCESS", timeout=RECONNECT_MS)
        settle(lambda: len(happened(page)[0]) >= 5)
        events, ids = happened(page)
        assert events == [
            ("transition", "PROCESSING"),
            ("stage", "generating"),
            ("progress", "while refused"),
            ("stage", "uploading"),
            ("transition", "SUCCESS"),
        ]  # resumed: no second snapshot
        assert stream_ids_in_order(ids), ids
        assert [answer for answer, _, _ in streams.requests] == ["200", "503", "503", "200"], streams.requests
        assert streams.requests[-1][1] == f"last_event_id={last_id}" or streams.requests[-1][2] == last_id
        assert page.evaluate("window.__sameDocument"), "the page reloaded"
