"""A real browser on the real pages: headless Chromium (Debian's package) driven by Playwright.

The app is served by werkzeug in a thread against a private redis-server. A person logs in
with a token, watches a task page and the dashboard while the test drives the task through
the Engine (claim, stage, progress, complete), and sees each change appear without a reload.
Screenshots of both pages go to /tmp for a human (or a reviewing agent) to look at.

Chromium and Playwright as tests/support/browser.py finds them: skips loudly without them, and
fails instead when REQUIRE_REAL_REDIS=1.
"""

from __future__ import annotations

import pytest

from ghostless import Engine
from ghostless.web import close_app, create_app
from tests.conftest import register_test_types
from tests.support.browser import browser_context, need_browser, served

SHOTS = {"dashboard": "/tmp/ghostless-dashboard.png", "task": "/tmp/ghostless-task.png"}


@pytest.fixture
def site(redis_server):
    """(base URL, engine, alice's token): the app served on a free port, on a private Redis."""
    need_browser()
    client = redis_server.client()
    client.flushall()
    engine = register_test_types(Engine(client, namespace="tb", dispatcher=None))
    token = engine.users.add("alice")
    app = create_app(
        {
            "GHOSTLESS_ENGINE": engine,
            "SECRET_KEY": "browser-test",
            "GHOSTLESS_DASHBOARD_CACHE": 0,
            "GHOSTLESS_BROKER_BLOCK_MS": 100,
            "GHOSTLESS_SSE_KEEPALIVE": 1.0,
        }
    )
    with served(app) as base:
        yield base, engine, token
    close_app(app)
    client.close()


@pytest.fixture
def browser():
    with browser_context() as context:
        yield context


def test_a_person_watches_a_task_run_live_without_reloading(site, browser):
    from playwright.sync_api import expect

    base, engine, token = site
    errors = []
    dash = browser.new_page()
    dash.on("pageerror", lambda e: errors.append(str(e)))
    dash.goto(base + "/login?next=/")
    dash.fill("#token", token)
    dash.click("button[type=submit]")
    expect(dash.locator("h1")).to_have_text("Dashboard")
    expect(dash.locator("#live-dot")).to_have_text("live")
    dash.evaluate("window.__sameDocument = true")  # gone if the page ever reloads

    task = engine.submit("render", {"prompt": "a cat in a hat"}, owner="alice")
    expect(dash.locator('[data-total="PENDING"]')).to_have_text("1")  # the dashboard follows, live
    expect(dash.locator("#feed")).to_contain_text(task.id)

    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/tasks/{task.id}")
    headline = page.locator("#panel .headline")
    expect(headline).to_have_text("Waiting to start")
    expect(page.locator("#live-dot")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")

    lease = engine.claim(task.id, "w1")
    expect(page.locator("#panel .badge").first).to_have_text("PROCESSING")
    engine.stage(lease, "generating")
    expect(headline).to_have_text("Generating")
    expect(page.locator("#panel .stage-name")).to_have_text("generating")
    engine.progress(lease, 0.4, "step 20 of 50")
    expect(page.locator("#progress")).to_have_attribute("value", "0.4")
    expect(page.locator("#panel .detail").first).to_have_text("step 20 of 50")
    expect(page.locator("#panel .pct")).to_have_text("40%")
    expect(page.locator(".timeline")).to_contain_text("stage generating")
    expect(dash.locator('[data-total="PROCESSING"]')).to_have_text("1")
    page.screenshot(path=SHOTS["task"].replace(".png", "-running.png"), full_page=True)

    engine.complete(lease, {"url": "https://example.invalid/cat.png"})
    expect(page.locator("#panel .badge").first).to_have_text("SUCCESS")
    expect(headline).to_have_text("Done")
    expect(page.locator(".timeline")).to_contain_text("PROCESSING → SUCCESS")
    expect(page.locator("#panel")).to_contain_text("cat.png")
    expect(page.locator("#edit")).to_be_hidden()
    expect(dash.locator('[data-total="SUCCESS"]')).to_have_text("1")
    expect(dash.locator('[data-total="PROCESSING"]')).to_have_text("0")
    assert page.evaluate("window.__sameDocument") and dash.evaluate("window.__sameDocument")
    assert errors == []

    page.screenshot(path=SHOTS["task"], full_page=True)
    dash.screenshot(path=SHOTS["dashboard"], full_page=True)


def test_the_cancel_button_sends_the_csrf_token_and_the_page_follows(site, browser):
    from playwright.sync_api import expect

    base, engine, token = site
    task = engine.submit("render", {"prompt": "a dog"}, owner="alice")
    page = browser.new_page()
    page.goto(f"{base}/login?next=/tasks/{task.id}")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("#live-dot")).to_have_text("live")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button[data-post$='/cancel']")
    expect(page.locator("#panel .badge").first).to_have_text("CANCELLED")
    assert engine.get(task.id).status.value == "CANCELLED"
    assert engine.history(task.id)[-1].by == "alice"


def test_live_text_loses_its_bidi_controls_and_the_log_out_button_logs_out(site, browser):
    from playwright.sync_api import expect

    base, engine, token = site
    page = browser.new_page()
    page.goto(base + "/login?next=/tasks")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/tasks")  # logged in and there: a reload now is not mid-navigation
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    page.reload()  # the list now shows the task's row; its live cells are written by app.js
    expect(page.locator("#live-dot")).to_have_text("live")
    engine.cancel(task.id, by="alice", reason="gpj.\u202eexe.photo")
    row = page.locator(f'tr[data-task="{task.id}"] .stage')
    expect(row).to_have_text("gpj.exe.photo")  # the script's text, control stripped

    dash = browser.new_page()
    dash.goto(base + "/")
    expect(dash.locator("#live-dot")).to_have_text("live")
    other = engine.submit("render", {"prompt": "a dog"}, owner="alice")
    engine.cancel(other.id, by="alice", reason="\u2067isolated\u2069 \u200fmarked")
    expect(dash.locator("#feed li").first).to_contain_text("isolated marked")
    assert not set("\u202e\u2067\u2069\u200f") & set(dash.locator("#feed").inner_text())

    dash.click("header button:has-text('Log out')")  # a POST form with the CSRF token, no script needed
    expect(dash.locator("h1")).to_have_text("Log in")
    dash.goto(base + "/api/me")
    assert '"unauthorized"' in dash.content()


def test_a_one_time_login_link_asks_first_and_its_button_logs_in(site, browser):
    from playwright.sync_api import expect

    base, engine, _ = site
    code = engine.users.login_code("alice", ttl=60)
    page = browser.new_page()
    page.goto(f"{base}/login/{code}")
    expect(page.locator("h1")).to_have_text("Log in as alice?")
    assert engine.users.login_code_user(code) is not None  # opening the page used nothing
    page.click("button:has-text('Log in as alice')")  # the browser's own Origin passes the check
    expect(page.locator("h1")).to_have_text("Dashboard")
    assert engine.users.login_code_user(code) is None
