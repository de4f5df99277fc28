"""The pages (web/pages.py): login, dashboard, task list, task page and their live panels.

Rendered for the owner and an admin; another user's task is a 404 page and appears in no
list or panel; the words on the task page say what a person needs to know.
"""

from __future__ import annotations

import re

import pytest

from ghostless import RateLimited, State
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import sibling
from tests.support.wait import wait_for_server_time

from .helpers import GHOST, task_in

HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture
def app(make_app):
    return make_app(GHOSTLESS_DASHBOARD_CACHE=0)  # every render reads the engine afresh


def page(client, url, auth, status=200):
    r = client.get(url, headers={**HTML, **auth})
    assert r.status_code == status, r.get_data(as_text=True)[:500]
    assert r.mimetype == "text/html"
    return r.get_data(as_text=True)


def text(html: str) -> str:
    """The page's words, without tags (whitespace collapsed)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# -- login and access ---------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["/", "/tasks", "/tasks/" + GHOST])
def test_pages_send_a_visitor_without_a_session_to_the_login_page(client, url):
    r = client.get(url, headers=HTML)
    assert r.status_code == 303 and r.headers["Location"].startswith("/login?next=")


def test_a_panel_without_a_session_is_a_401(client):
    assert client.get("/dashboard/live").status_code == 401


def test_logging_in_with_the_form_leads_to_the_page_asked_for(app, tokens):
    browser = app.test_client()
    form = page(browser, "/login?next=/tasks", {})
    assert 'name="token"' in form and 'value="/tasks"' in form
    r = browser.post("/login", data={"token": tokens["alice"], "next": "/tasks"}, headers=HTML)
    assert (r.status_code, r.headers["Location"]) == (303, "/tasks")
    assert "Your tasks" in page(browser, "/tasks", {})


def test_a_failed_form_login_shows_the_form_again_with_the_reason(client):
    r = client.post("/login", data={"token": "gl_wrong-token-123"}, headers=HTML)
    assert r.status_code == 401 and "Unknown or revoked token" in r.get_data(as_text=True)
    r = client.post("/login", data={"token": "x"}, headers={**HTML, "Origin": "https://evil.example"})
    assert r.status_code == 403 and "another site" in r.get_data(as_text=True)


def test_pages_ship_their_own_assets_and_a_strict_content_security_policy(client, auth):
    r = client.get("/", headers={**HTML, **auth["alice"]})
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    html = r.get_data(as_text=True)
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html)  # nothing from another origin
    for asset in re.findall(r"""(?:src|href)=["'](/static/[^"']+)""", html):
        assert client.get(asset).status_code == 200


# -- dashboard ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", ["alice", "root"])
def test_the_dashboard_shows_counts_per_state_and_queue(client, engine, auth, caller):
    for state in (State.PENDING, State.SUCCESS, State.SUCCESS, State.FAILED, State.TIMEOUT):
        task_in(engine, state)
    html = page(client, "/", auth[caller])
    assert re.search(r'data-total="SUCCESS">2<', html) and re.search(r'data-total="FAILED">1<', html)
    assert "Queue images" in html and "Queue other" in html
    assert "Throughput" in html and "Time in state" in html and "Failure reasons" in html
    assert "<svg" in html and "boom" in html  # the chart, and a failure reason
    live = page(client, "/dashboard/live", auth[caller])
    assert 'data-total="SUCCESS">2<' in live and "<html" not in live


def test_the_dashboard_shows_each_rate_limit_with_its_starts_in_the_window(client, engine, auth):
    assert "No task type has a rate limit." in page(client, "/dashboard/live", auth["alice"])
    engine.task(name="paint", queue="models", upstream="image-model", breaker=False, rate="20/s")(lambda ctx: None)
    engine.claim(engine.submit("paint", {}, owner="alice").id, "w1")
    live = page(client, "/dashboard/live", auth["alice"])
    assert "Rate limits" in live and "image-model" in live and "20/s" in live and "1 of 20" in live


def test_only_admins_get_the_admin_controls(client, engine, auth):
    task_in(engine, State.PENDING)
    assert "/api/admin/" not in page(client, "/", auth["alice"])
    html = page(client, "/", auth["root"])
    assert "/api/admin/queues/images/drain" in html and "/api/admin/retry-failed" in html


def test_the_dashboard_lists_stuck_tasks_and_events_of_the_callers_tasks_only(make_app, engine, auth):
    client = make_app(GHOSTLESS_STUCK_AFTER=0.001, GHOSTLESS_DASHBOARD_CACHE=0).test_client()
    alices, bobs = task_in(engine, State.PENDING).id, task_in(engine, State.PENDING, owner="bob").id
    wait_for_server_time(engine.redis, (engine.get(bobs).updated_at + 0.01) * 1000)
    mine = page(client, "/", auth["alice"])
    assert alices in mine and bobs not in mine
    assert "waiting too long" in mine
    everything = page(client, "/", auth["root"])
    assert alices in everything and bobs in everything


# -- task list ----------------------------------------------------------------------------------------
def test_the_task_list_never_shows_another_owners_task(client, engine, auth):
    alices = {task_in(engine, s).id for s in (State.PENDING, State.FAILED)}
    bobs = {task_in(engine, s, owner="bob").id for s in (State.PENDING, State.FAILED)}
    for query in ("", "?status=PENDING", "?status=FAILED", "?type=render", "?queue=images", "?owner=bob"):
        html = page(client, "/tasks" + query, auth["alice"])
        assert not any(b in html for b in bobs), query
    assert all(a in page(client, "/tasks", auth["alice"]) for a in alices)
    everyone = page(client, "/tasks", auth["root"])
    assert all(t in everyone for t in alices | bobs)
    only_bob = page(client, "/tasks?owner=bob", auth["root"])
    assert all(b in only_bob for b in bobs) and not any(a in only_bob for a in alices)


def test_the_task_list_filters_and_pages_with_a_cursor(client, engine, auth):
    ids = [task_in(engine, State.PENDING).id for _ in range(3)]
    failed = task_in(engine, State.FAILED).id
    html = page(client, "/tasks?status=PENDING&limit=2", auth["alice"])
    first = {t for t in ids if t in html}
    assert len(first) == 2 and failed not in html  # tasks of one millisecond may come in any order
    older = re.search(r'href="([^"]+)" rel="next"', html).group(1).replace("&amp;", "&")
    assert "status=PENDING" in older and "cursor=" in older
    rest = page(client, older, auth["alice"])
    assert {t for t in ids if t in rest} == set(ids) - first and 'rel="next"' not in rest


@pytest.mark.parametrize(
    "query",
    ["?status=NOPE", "?cursor=garbage", "?limit=0", "?limit=%C2%B2", "?cursor=%C2%B2.images.0123456789abcdef0123"],
)
def test_bad_list_filters_are_a_400_page(client, auth, query):
    assert "Bad request" in page(client, "/tasks" + query, auth["alice"], status=400)


# -- the task page ------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", ["alice", "root"])
def test_the_task_page_shows_status_stage_progress_and_timeline(client, engine, auth, caller):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "generating")
    engine.progress(lease, 0.4, "step 20 of 50")
    html = page(client, f"/tasks/{task.id}", auth[caller])
    words = text(html)
    assert "Generating" in words and "step 20 of 50" in words and "attempt 1 of 3" in words
    assert '<progress id="progress" max="1" value="0.4">' in html
    assert "PENDING → PROCESSING" in words and "stage generating" in words
    assert f"/api/tasks/{task.id}/cancel" in html and 'id="edit"' in html
    assert "&#34;prompt&#34;: &#34;a cat&#34;" in html
    assert ("Reclaim now" in html) == (caller == "root")
    panel = page(client, f"/tasks/{task.id}/panel", auth[caller])
    assert "step 20 of 50" in panel and "<html" not in panel


@pytest.mark.parametrize("url", ["/tasks/{id}", "/tasks/{id}/panel"])
def test_another_users_task_page_is_a_404_like_a_missing_one(client, engine, auth, url):
    task = task_in(engine, State.PROCESSING)
    foreign = client.get(url.format(id=task.id), headers={**HTML, **auth["bob"]})
    missing = client.get(url.format(id=GHOST), headers={**HTML, **auth["bob"]})
    assert foreign.status_code == missing.status_code == 404
    assert task.id not in foreign.get_data(as_text=True) and "a cat" not in foreign.get_data(as_text=True)
    assert foreign.get_data() == missing.get_data().replace(GHOST.encode(), task.id.encode())


def test_a_waiting_task_says_its_place_in_line(client, engine, auth):
    dispatching = sibling(engine, dispatcher=FakeDispatcher())
    ids = [dispatching.submit("render", {"i": i}, owner="alice").id for i in range(5)]
    assert "You are 5th in line" in text(page(client, f"/tasks/{ids[4]}", auth["alice"]))
    assert "You are 1st in line" in text(page(client, f"/tasks/{ids[0]}", auth["alice"]))


def test_a_retrying_task_says_which_attempt_comes_and_why(client, engine, auth):
    task = engine.submit("render", {}, owner="alice")
    engine.fail(engine.claim(task.id, "w1"), "upstream", "model API timed out")
    assert "Retrying (2 of 3) after: model API timed out" in text(page(client, f"/tasks/{task.id}", auth["alice"]))


def test_a_task_parked_by_a_rate_limit_says_it_waits_for_its_turn_and_an_expired_one_says_so(client, engine, auth):
    engine.task(name="paint", queue="models", upstream="image-model", breaker=False, rate="1/min")(lambda ctx: None)
    engine.claim(engine.submit("paint", {}, owner="alice").id, "w1")
    task = engine.submit("paint", {}, owner="alice", expires_in=3)  # time for two page renders under load
    assert "unless it has started" in text(page(client, f"/tasks/{task.id}", auth["alice"]))
    with pytest.raises(RateLimited) as busy:
        engine.claim(task.id, "w1")
    engine.park(task.id, busy.value.wait, busy.value.upstream, busy.value.kind)
    shown = text(page(client, f"/tasks/{task.id}", auth["alice"]))
    assert "Waiting for its turn at image-model (rate limit)" in shown and "starts in" in shown
    wait_for_server_time(engine.redis, engine.get(task.id).expires_at * 1000)
    engine.sweep()
    assert "Expired: it did not start in time" in text(page(client, f"/tasks/{task.id}", auth["alice"]))


def test_ended_tasks_say_how_and_offer_what_applies(client, engine, auth):
    failed = task_in(engine, State.FAILED)
    html = page(client, f"/tasks/{failed.id}", auth["alice"])
    assert "Failed: it broke" in text(html) and "/retry" in html and "/cancel" not in html
    done = task_in(engine, State.SUCCESS)
    html = page(client, f"/tasks/{done.id}", auth["alice"])
    assert "Done" in text(html) and "s3://cat" in html and "/retry" not in html and 'id="edit"' not in html


def test_an_edited_task_links_to_its_replacement(client, engine, auth):
    old = task_in(engine, State.PENDING)
    new = engine.edit(old.id, {"prompt": "a dog"}, by="alice")
    html = page(client, f"/tasks/{old.id}", auth["alice"])
    assert "Replaced by an edit" in text(html) and f"/tasks/{new.id}" in html


def test_an_overdue_task_says_so(client, engine, auth):
    task = engine.submit("render", {}, owner="alice", due_in=0.02, escalate_in=0.04)
    wait_for_server_time(engine.redis, engine.get(task.id).due_at * 1000)
    engine.sweep()
    assert "Overdue: it should have finished by" in text(page(client, f"/tasks/{task.id}", auth["alice"]))
    wait_for_server_time(engine.redis, engine.get(task.id).escalate_at * 1000)
    engine.sweep()
    assert "Escalated" in text(page(client, f"/tasks/{task.id}", auth["alice"]))


def test_a_task_in_a_draining_queue_says_the_queue_is_paused(client, engine, auth):
    task = task_in(engine, State.PENDING)
    engine.drain("images")
    assert "queue is paused" in text(page(client, f"/tasks/{task.id}", auth["alice"]))


@pytest.mark.parametrize(
    "n, words",
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (102, "102nd"),
        (111, "111th"),
    ],
)
def test_places_in_line_read_as_ordinals(n, words):
    from ghostless.web.friendly import ordinal

    assert ordinal(n) == words


# -- bidi control characters --------------------------------------------------------------------------
def test_no_page_shows_a_bidi_control_character_from_a_tasks_text(client, engine, auth):
    from ghostless.web.friendly import BIDI_CONTROLS

    reversing = "gpj.\u202eexe.photo" + BIDI_CONTROLS  # reads "photo.exe.jpg" reversed, and every other control
    running = task_in(engine, State.PENDING)
    lease = engine.claim(running.id, "w1")
    engine.progress(lease, 0.5, reversing)
    cancelled = task_in(engine, State.PENDING)
    engine.cancel(cancelled.id, by="alice", reason=reversing)
    for url in (
        "/",
        "/dashboard/live",
        "/tasks",
        f"/tasks/{running.id}",
        f"/tasks/{running.id}/panel",
        f"/tasks/{cancelled.id}",
        f"/tasks/{cancelled.id}/panel",
    ):
        html = page(client, url, auth["alice"])
        assert not set(BIDI_CONTROLS) & set(html), url
    assert "gpj.exe.photo" in page(client, f"/tasks/{cancelled.id}", auth["alice"])  # the text itself stays
    # Stored and answered as sent: only display strips them.
    assert engine.get(cancelled.id).reason == reversing
    assert client.get(f"/api/tasks/{cancelled.id}", headers=auth["alice"]).get_json()["task"]["reason"] == reversing


def test_the_pages_script_strips_the_same_bidi_controls_as_the_templates():
    from ghostless.web.friendly import BIDI_CONTROLS
    from tests.support.procs import ROOT

    script = (ROOT / "web" / "static" / "app.js").read_text()
    pattern = re.search(r"const BIDI = /(\[[^\]]+\])/g;", script).group(1)  # same syntax in Python's re
    stripped = {chr(c) for c in range(0x10000) if re.fullmatch(pattern, chr(c))}
    assert stripped == set(BIDI_CONTROLS)  # where it is used: tests/web/test_browser.py
