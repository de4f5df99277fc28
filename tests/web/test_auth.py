"""Authentication (web/auth.py): bearer tokens, cookie login/logout, CSRF on cookie POSTs."""

from __future__ import annotations

import base64
import logging
import zlib

import pytest

from ghostless import State
from ghostless.web import create_app

from .conftest import TEST_CONFIG
from .helpers import task_in
from .sse_client import open_sse

RENDER = {"type": "render", "args": {"prompt": "a cat"}}


def code(response) -> str:
    return response.get_json()["error"]["code"]


def login(client, token, **headers):
    return client.post("/login", data={"token": token}, headers={"Accept": "application/json", **headers})


@pytest.fixture
def browser(app, tokens):
    """A test client logged in as alice with the session cookie; ``browser.csrf`` its token."""
    client = app.test_client()
    r = login(client, tokens["alice"])
    assert r.status_code == 200
    client.csrf = r.get_json()["csrf_token"]
    return client


# -- bearer ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header", [None, "Bearer", "Bearer gl_not-a-real-token", "Basic YWxpY2U6cHc=", "bearer  ", "Token abc"]
)
def test_a_call_without_a_valid_bearer_token_is_a_401(client, tokens, header):
    r = client.get("/api/tasks", headers={"Authorization": header} if header else {})
    assert (r.status_code, code(r)) == (401, "unauthorized")
    assert r.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_bearer_scheme_is_case_insensitive(client, tokens):
    r = client.get("/api/me", headers={"Authorization": f"bearer {tokens['alice']}"})
    assert r.get_json() == {"user": "alice", "admin": False, "auth": "bearer"}


def test_a_revoked_users_token_stops_working(client, engine, tokens, auth):
    assert client.get("/api/tasks", headers=auth["bob"]).status_code == 200
    engine.users.revoke("bob")
    assert client.get("/api/tasks", headers=auth["bob"]).status_code == 401


def test_bearer_posts_need_no_csrf_token(client, auth):
    assert client.post("/api/tasks", json=RENDER, headers=auth["alice"]).status_code == 201


# -- login, logout --------------------------------------------------------------------------------
def test_login_sets_an_httponly_samesite_lax_session_cookie_without_the_token(app, tokens):
    client = app.test_client()
    r = client.post("/login", data={"token": tokens["alice"], "next": "/tasks"})
    assert (r.status_code, r.headers["Location"]) == (303, "/tasks")
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("ghostless_session=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    payload = cookie.split("=", 1)[1].split(";")[0]
    compressed = payload.startswith(".")
    body = payload.lstrip(".").split(".")[0]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    assert tokens["alice"].encode() not in (zlib.decompress(raw) if compressed else raw)
    assert client.get("/api/me").get_json() == {"user": "alice", "admin": False, "auth": "cookie"}


def test_the_login_page_is_a_form(client):
    r = client.get("/login")
    assert r.status_code == 200 and 'name="token"' in r.get_data(as_text=True)


@pytest.mark.parametrize(
    "next_url",
    [
        "//evil.example",
        "https://evil.example/",
        "/\\evil.example",
        "tasks",
        "/\t/evil.example",
        "/\n/evil.example",
        "/\x00/evil.example",
    ],
)
def test_login_never_redirects_off_site(client, tokens, next_url):
    r = client.post("/login", data={"token": tokens["alice"], "next": next_url})
    assert r.headers["Location"] == "/"


@pytest.mark.parametrize("token", ["", "gl_wrong-token-123", None])
def test_login_with_a_bad_token_is_a_401_and_sets_no_session(client, token):
    r = client.post("/login", data={"token": token} if token is not None else {})
    assert (r.status_code, code(r)) == (401, "unauthorized")
    assert client.get("/api/me").status_code == 401


@pytest.mark.parametrize(
    "header", [{"Origin": "https://evil.example"}, {"Origin": "null"}, {"Referer": "https://evil.example/page"}]
)
def test_a_cross_origin_login_is_refused(client, tokens, header):
    r = login(client, tokens["alice"], **header)
    assert (r.status_code, code(r)) == (403, "csrf_failed")
    assert client.get("/api/me").status_code == 401


@pytest.mark.parametrize(
    "body", [b"[" * 100_000, b"{", b"[1]", b'{"token": 5}', b"", b'{"token": "\\ud800gl_abcdefgh"}']
)
def test_a_login_with_a_malformed_json_body_is_a_4xx(client, body):
    r = client.post("/login", data=body, content_type="application/json")
    assert r.status_code in (400, 401) and code(r) in ("invalid", "unauthorized")


def test_a_json_login_is_accepted(client, tokens):
    r = client.post("/login", json={"token": tokens["alice"]})
    assert r.status_code == 200 and r.get_json()["user"] == "alice"


def test_a_same_origin_login_is_accepted(client, tokens):
    assert login(client, tokens["alice"], Origin="http://localhost").status_code == 200


def test_logout_with_the_csrf_token_ends_the_session(browser):
    assert browser.get("/api/me").status_code == 200
    r = browser.post("/logout", data={"csrf_token": browser.csrf})
    assert (r.status_code, r.headers["Location"]) == (303, "/login")
    assert browser.get("/api/me").status_code == 401


def test_a_json_logout_sends_the_csrf_token_in_the_header(browser):
    r = browser.post("/logout", headers={"X-CSRF-Token": browser.csrf, "Accept": "application/json"})
    assert r.get_json() == {"ok": True}
    assert browser.get("/api/me").status_code == 401


def test_a_get_of_logout_shows_a_logout_button_and_never_logs_out(browser):
    r = browser.get("/logout")  # what <img src=/logout> on a same-site page sends
    page = r.get_data(as_text=True)
    assert r.status_code == 200 and 'method="post" action="/logout"' in page
    assert f'name="csrf_token" value="{browser.csrf}"' in page
    assert browser.get("/api/me").status_code == 200


@pytest.mark.parametrize("sent", [{}, {"csrf_token": "wrong"}])
def test_a_logout_without_the_sessions_csrf_token_is_refused(browser, sent):
    r = browser.post("/logout", data=sent, headers={"Accept": "application/json"})
    assert (r.status_code, code(r)) == (403, "csrf_failed")
    page = browser.post("/logout", data=sent, headers={"Accept": "text/html"})
    assert page.status_code == 403 and "use the button" in page.get_data(as_text=True)
    assert browser.get("/api/me").status_code == 200


def test_a_logout_without_a_session_just_goes_to_the_login_page(client):
    assert client.get("/logout").headers["Location"] == "/login"
    assert client.post("/logout").headers["Location"] == "/login"


def test_every_page_logs_out_with_a_post_form_and_nothing_links_to_logout(browser):
    from tests.support.procs import ROOT

    page = browser.get("/").get_data(as_text=True)
    assert 'href="/logout"' not in page
    form = page[page.index('<form class="logout"') :]
    assert form.startswith('<form class="logout" method="post" action="/logout">')
    assert f'name="csrf_token" value="{browser.csrf}"' in form[: form.index("</form>")]
    for path in [*(ROOT / "web" / "templates").iterdir(), *(ROOT / "web" / "static").iterdir()]:
        text = path.read_text()
        assert "href=\"{{ url_for('auth.logout') }}\"" not in text and "'/logout'" not in text, path


def test_an_older_session_stays_valid_after_a_new_login_and_revoking_ends_both(app, browser, tokens, engine):
    laptop = app.test_client()
    assert login(laptop, tokens["alice"]).status_code == 200  # a second browser of the same user
    assert browser.get("/api/me").status_code == 200 and laptop.get("/api/me").status_code == 200
    engine.users.revoke("alice")
    assert browser.get("/api/me").status_code == 401 and laptop.get("/api/me").status_code == 401


def test_revoking_the_user_ends_their_sessions(browser, engine):
    engine.users.revoke("alice")
    assert browser.get("/api/tasks").status_code == 401


def test_a_bearer_header_takes_precedence_over_the_cookie(browser, auth):
    assert browser.get("/api/me", headers=auth["bob"]).get_json()["user"] == "bob"
    r = browser.get("/api/me", headers={"Authorization": "Bearer gl_not-a-real-token"})
    assert r.status_code == 401


# -- CSRF -----------------------------------------------------------------------------------------
def test_a_cookie_post_without_the_csrf_token_is_a_403(browser, engine):
    r = browser.post("/api/tasks", json=RENDER)
    assert (r.status_code, code(r)) == (403, "csrf_failed")
    assert engine.stats()["images"]["counts"]["PENDING"] == 0


def test_a_cookie_post_with_a_wrong_csrf_token_is_a_403(browser):
    for wrong in ["", "x" * 43, browser.csrf + "x", "é"]:
        r = browser.post("/api/tasks", json=RENDER, headers={"X-CSRF-Token": wrong.encode().decode("latin-1")})
        assert (r.status_code, code(r)) == (403, "csrf_failed")


def test_a_cookie_post_with_the_csrf_header_is_accepted(browser):
    assert browser.post("/api/tasks", json=RENDER, headers={"X-CSRF-Token": browser.csrf}).status_code == 201


def test_a_cookie_post_with_the_csrf_form_field_is_accepted(browser, engine):
    task = task_in(engine, State.PENDING)
    r = browser.post(f"/api/tasks/{task.id}/cancel", data={"csrf_token": browser.csrf})
    assert r.status_code == 200 and engine.get(task.id).status == State.CANCELLED


def test_api_csrf_returns_the_sessions_token(browser):
    assert browser.get("/api/csrf").get_json()["csrf_token"] == browser.csrf


def test_api_csrf_is_for_sessions_only(client, auth):
    assert client.get("/api/csrf").status_code == 401
    r = client.get("/api/csrf", headers=auth["alice"])
    assert (r.status_code, code(r)) == (400, "no_session")


def test_a_new_login_issues_a_new_csrf_token(browser, tokens):
    old = browser.csrf
    new = login(browser, tokens["alice"]).get_json()["csrf_token"]
    assert new != old
    assert browser.post("/api/tasks", json=RENDER, headers={"X-CSRF-Token": old}).status_code == 403


def test_event_streams_authenticate_with_the_session_cookie(browser, engine):
    task = task_in(engine, State.SUCCESS)
    stream = open_sse(browser, f"/api/tasks/{task.id}/events")
    assert stream.next()["event"] == "snapshot"
    stream.close()


# -- secret key -----------------------------------------------------------------------------------
def test_without_a_secret_key_a_random_one_is_used_and_a_warning_logged(engine, monkeypatch, caplog):
    monkeypatch.delenv("GHOSTLESS_SECRET_KEY", raising=False)
    config = {k: v for k, v in TEST_CONFIG.items() if k != "SECRET_KEY"}
    with caplog.at_level(logging.WARNING, logger="ghostless.web"):
        first = create_app({**config, "GHOSTLESS_ENGINE": engine})
        second = create_app({**config, "GHOSTLESS_ENGINE": engine})
    assert first.secret_key and first.secret_key != second.secret_key
    assert any("will not survive a restart" in m for m in caplog.messages)


def test_a_session_is_checked_against_the_secret_keys_of_the_moment(app, browser):
    assert browser.get("/api/me").status_code == 200
    app.config["SECRET_KEY"] = "rotated"  # the cookie was signed with the old key
    assert browser.get("/api/me").status_code == 401
    app.config["SECRET_KEY_FALLBACKS"] = ["test-secret"]  # the old key still accepted
    assert browser.get("/api/me").status_code == 200


def test_the_secret_key_comes_from_the_environment(engine, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_SECRET_KEY", "from-env")
    config = {k: v for k, v in TEST_CONFIG.items() if k != "SECRET_KEY"}
    assert create_app({**config, "GHOSTLESS_ENGINE": engine}).secret_key == "from-env"


# -- one-time login links --------------------------------------------------------------------------
def confirm(client, code, **headers):
    """Open the link's page and press its button: the POST with the page's form token."""
    page = client.get(f"/login/{code}").get_data(as_text=True)
    form_token = page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    return client.post(f"/login/{code}", data={"csrf_token": form_token}, headers=headers)


def test_a_one_time_login_link_opens_a_session_once(app, engine):
    engine.users.add("dora")
    code = engine.users.login_code("dora", ttl=60)
    client = app.test_client()
    first = confirm(client, code, Origin="http://localhost")
    assert (first.status_code, first.headers["Location"]) == (303, "/")
    assert client.get("/api/me").get_json()["user"] == "dora"
    other = app.test_client()
    assert other.get(f"/login/{code}").status_code == 401  # used up
    assert other.get("/login/not-a-real-code-123").status_code == 401


def test_a_login_link_opens_a_confirmation_page_and_a_get_uses_nothing(app, browser, engine):
    engine.users.add("mallory")
    code = engine.users.login_code("mallory", ttl=60)
    for _ in range(2):  # a prefetch, a crawler, a page of another site linking here
        r = browser.get(f"/login/{code}")
        page = r.get_data(as_text=True)
        assert r.status_code == 200 and "Log in as mallory?" in page
        assert f'method="post" action="/login/{code}"' in page and "You are logged in as alice" in page
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert browser.get("/api/me").get_json()["user"] == "alice"  # the session is not replaced
    assert engine.users.login_code_user(code).name == "mallory"  # and the code is not used


@pytest.mark.parametrize(
    "header", [{"Origin": "https://evil.example"}, {"Referer": "https://evil.example/x"}, {"Origin": "null"}]
)
def test_a_cross_origin_redeem_of_a_login_link_is_refused(browser, engine, header):
    engine.users.add("mallory")
    code = engine.users.login_code("mallory", ttl=60)
    r = confirm(browser, code, **header)
    assert r.status_code == 403 and "another site" in r.get_data(as_text=True)
    assert browser.get("/api/me").get_json()["user"] == "alice"
    assert engine.users.login_code_user(code) is not None


@pytest.mark.parametrize("form", [{}, {"csrf_token": "guessed"}])
def test_a_redeem_without_the_confirmation_pages_form_token_is_refused(app, engine, form):
    engine.users.add("mallory")
    code = engine.users.login_code("mallory", ttl=60)
    victim = app.test_client()
    victim.get(f"/login/{code}")  # even with a form token of its own in its session
    r = victim.post(f"/login/{code}", data=form)  # a form on another site sends no Origin in old browsers
    assert r.status_code == 403 and "open the link again" in r.get_data(as_text=True)
    assert victim.get("/api/me").status_code == 401 and engine.users.login_code_user(code) is not None


def test_a_redeem_answers_json_to_a_json_client(app, engine):
    engine.users.add("dora")
    r = confirm(app.test_client(), engine.users.login_code("dora", ttl=60), Accept="application/json")
    assert r.get_json()["user"] == "dora" and r.get_json()["csrf_token"]


def test_tokens_issued_at_once_are_all_revoked_with_their_user(engine):
    import threading

    issued, lock = [], threading.Lock()

    def issue():
        for _ in range(10):
            token = engine.users.add("carol")
            with lock:
                issued.append(token)

    threads = [threading.Thread(target=issue) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.users.get("carol").tokens == len(issued) == 40  # none lost from the record
    assert engine.users.revoke("carol")
    engine.users.add("carol")  # the name given again later
    assert [t for t in issued if engine.users.authenticate(t)] == []


def test_a_token_missing_from_its_users_record_is_refused_and_revoked_with_them(engine):
    from ghostless.core.users import token_digest

    engine.users.add("dave")
    orphan = "gl_" + "x" * 43  # as an unguarded concurrent add could leave one
    engine.redis.hset(engine.keys.tokens(), token_digest(orphan), "dave")
    assert engine.users.authenticate(orphan) is None
    assert engine.users.revoke("dave")
    assert engine.redis.hget(engine.keys.tokens(), token_digest(orphan)) is None


def test_after_logout_a_copy_of_the_session_cookie_no_longer_works(app, tokens):
    browser = app.test_client()
    csrf = browser.post("/login", json={"token": tokens["root"]}).get_json()["csrf_token"]
    copy = app.test_client()
    copy.set_cookie("ghostless_session", browser.get_cookie("ghostless_session").value)
    assert copy.get("/api/me").status_code == 200
    r = browser.post("/logout", headers={"Accept": "application/json", "X-CSRF-Token": csrf})
    assert r.get_json() == {"ok": True}
    assert copy.get("/api/me").status_code == 401
    assert copy.post("/api/admin/queues/images/drain", headers={"X-CSRF-Token": csrf}).status_code == 401


@pytest.mark.parametrize("how", ["revoke", "logout"])
def test_an_open_event_stream_ends_once_its_credential_is_gone(app, engine, tokens, how):
    browser = app.test_client()
    csrf = browser.post("/login", json={"token": tokens["alice"]}).get_json()["csrf_token"]
    feed = open_sse(browser, "/api/events")
    assert feed.next()["event"] == "ready"
    if how == "revoke":
        engine.users.revoke("alice")
    else:
        other = app.test_client()  # the same session, logged out from another tab
        other.set_cookie("ghostless_session", browser.get_cookie("ghostless_session").value)
        other.post("/logout", headers={"X-CSRF-Token": csrf})
    feed.rest(timeout=5)  # ends: it would otherwise send keep-alives for ever
    assert feed.ended


def test_an_open_stream_of_a_live_credential_goes_on(app, tokens):
    browser = app.test_client()
    browser.post("/login", json={"token": tokens["alice"]})
    feed = open_sse(browser, "/api/events")
    assert feed.next()["event"] == "ready"
    for _ in range(3):
        assert feed.next_comment() == ": keep-alive"
    feed.close()
