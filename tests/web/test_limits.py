"""Per-address limits on failed logins, login links and bearer checks (web/limits.py)."""

from __future__ import annotations

import pytest

from ghostless.core.app import AppError
from tests.support.wait import wait_until

from .conftest import TEST_CONFIG

WRONG = "gl_" + "w" * 43


def client_at(app, address: str):
    """A test client whose requests come from ``address`` (the socket's peer)."""
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def json_login(client, token, **headers):
    return client.post("/login", json={"token": token}, headers=headers)


def fail_logins(client, times: int) -> list[int]:
    return [json_login(client, WRONG).status_code for _ in range(times)]


def retry_after(response) -> int:
    return int(response.headers["Retry-After"])


def test_failed_logins_from_one_address_end_in_a_429_with_retry_after(app, tokens):
    attacker = client_at(app, "203.0.113.7")
    assert fail_logins(attacker, 10) == [401] * 10
    r = json_login(attacker, WRONG)
    assert (r.status_code, r.get_json()["error"]["code"]) == (429, "rate_limited")
    assert 1 <= retry_after(r) <= 60
    # While refused, the address's logins are not even looked at: a good token waits too.
    assert json_login(attacker, tokens["alice"]).status_code == 429


def test_a_good_login_is_not_blocked_by_other_addresses_failures(app, tokens):
    fail_logins(client_at(app, "203.0.113.7"), 11)
    for address in ("203.0.113.8", "2001:db8::1"):
        assert json_login(client_at(app, address), tokens["alice"]).status_code == 200


def test_good_logins_do_not_count(app, tokens):
    person = client_at(app, "198.51.100.1")
    assert [json_login(person, tokens["alice"]).status_code for _ in range(15)] == [200] * 15
    assert fail_logins(person, 1) == [401]


def test_the_login_form_shows_the_limit_to_a_browser(app):
    attacker = client_at(app, "203.0.113.7")
    fail_logins(attacker, 10)
    r = attacker.post("/login", data={"token": WRONG}, headers={"Accept": "text/html"})
    assert r.status_code == 429 and retry_after(r) >= 1
    page = r.get_data(as_text=True)
    assert "Too many failed logins from this address" in page and 'name="token"' in page


def test_failed_login_links_count_towards_the_login_limit(app, engine):
    engine.users.add("dora")
    code = engine.users.login_code("dora", ttl=60)
    attacker = client_at(app, "203.0.113.7")
    assert [attacker.get(f"/login/guess-{n:04d}-xxxx").status_code for n in range(10)] == [401] * 10
    assert attacker.get(f"/login/{code}").status_code == 429  # even the right code, for a while
    page = attacker.post(f"/login/{code}", data={"csrf_token": "x"})  # the form token fails first
    assert page.status_code == 403
    assert client_at(app, "203.0.113.8").get(f"/login/{code}").status_code == 200


def test_failed_bearer_checks_end_in_a_429_and_a_good_token_is_never_refused(app, engine, auth):
    caller = client_at(app, "203.0.113.7")
    wrong = {"Authorization": f"Bearer {WRONG}"}
    assert [caller.get("/api/me", headers=wrong).status_code for _ in range(30)] == [401] * 30
    r = caller.get("/api/tasks", headers=wrong)
    assert (r.status_code, r.get_json()["error"]["code"]) == (429, "rate_limited") and retry_after(r) >= 1
    assert caller.get("/api/me", headers=auth["alice"]).status_code == 200  # same address, good token
    assert client_at(app, "203.0.113.8").get("/api/me", headers=wrong).status_code == 401


def test_a_good_bearer_token_adds_nothing_to_any_counter(app, engine, auth):
    caller = client_at(app, "198.51.100.1")
    for _ in range(40):
        assert caller.get("/api/me", headers=auth["alice"]).status_code == 200
    assert list(engine.redis.scan_iter(match="*ratelimit*")) == []


def test_a_page_asked_with_a_wrong_token_shows_the_limit(app):
    caller = client_at(app, "203.0.113.7")
    wrong = {"Authorization": f"Bearer {WRONG}", "Accept": "text/html"}
    for _ in range(30):
        caller.get("/api/me", headers=wrong)
    r = caller.get("/tasks", headers=wrong)
    assert r.status_code == 429 and "too many failed token checks" in r.get_data(as_text=True)
    assert retry_after(r) >= 1


def test_the_counter_is_one_key_under_the_global_tag_that_expires_with_its_window(app, engine):
    fail_logins(client_at(app, "203.0.113.7"), 3)
    key = engine.keys.rate_limit("login", "203.0.113.7")
    assert key.startswith("t:{@global}:ratelimit:login:") and "203.0.113.7" not in key
    assert [k.decode() for k in engine.redis.scan_iter(match="*ratelimit*")] == [key]
    assert int(engine.redis.get(key)) == 3 and 0 < engine.redis.pttl(key) <= 60_000


def test_after_the_window_the_address_may_try_again(make_app, engine, tokens):
    app = make_app(GHOSTLESS_LOGIN_LIMIT=2, GHOSTLESS_LOGIN_WINDOW=1.0)  # three logins fit in it, however loaded
    attacker = client_at(app, "203.0.113.7")
    assert fail_logins(attacker, 3) == [401, 401, 429]
    key = engine.keys.rate_limit("login", "203.0.113.7")
    wait_until(lambda: not engine.redis.exists(key), timeout=10, what="the window to end")
    assert json_login(attacker, tokens["alice"]).status_code == 200


def test_a_limit_of_0_turns_it_off(make_app):
    app = make_app(GHOSTLESS_LOGIN_LIMIT=0, GHOSTLESS_BEARER_LIMIT=0)
    caller = client_at(app, "203.0.113.7")
    assert set(fail_logins(caller, 15)) == {401}
    assert {caller.get("/api/me", headers={"Authorization": f"Bearer {WRONG}"}).status_code for _ in range(35)} == {401}


def test_limits_come_from_the_environment(make_app, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_LOGIN_LIMIT", "1")
    monkeypatch.setenv("GHOSTLESS_BEARER_WINDOW", "5")
    app = make_app()
    assert (app.config["GHOSTLESS_LOGIN_LIMIT"], app.config["GHOSTLESS_BEARER_WINDOW"]) == (1, 5.0)
    assert fail_logins(client_at(app, "203.0.113.7"), 2) == [401, 429]


@pytest.mark.parametrize(
    "setting",
    [
        {"GHOSTLESS_LOGIN_LIMIT": "ten"},
        {"GHOSTLESS_BEARER_WINDOW": -1},
        {"GHOSTLESS_LOGIN_WINDOW": float("nan")},
        {"GHOSTLESS_PROXIES": "1.5"},
    ],
)
def test_a_bad_limit_setting_is_refused_when_the_app_is_made(engine, setting):
    from ghostless.web import create_app

    name = next(iter(setting))
    with pytest.raises(AppError, match=name):
        create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine, **setting})


def test_behind_a_configured_proxy_the_forwarded_address_is_the_client(make_app, tokens):
    app = make_app(GHOSTLESS_PROXIES=1)
    proxy = client_at(app, "10.0.0.2")  # every request arrives from the proxy

    def via(address):
        return {"X-Forwarded-For": address}

    assert [json_login(proxy, WRONG, **via("203.0.113.7")).status_code for _ in range(11)][-1] == 429
    assert json_login(proxy, tokens["alice"], **via("203.0.113.8")).status_code == 200


def test_without_a_configured_proxy_a_forwarded_header_changes_nothing(app):
    attacker = client_at(app, "203.0.113.7")
    codes = [json_login(attacker, WRONG, **{"X-Forwarded-For": f"198.51.100.{n}"}).status_code for n in range(11)]
    assert codes[-1] == 429  # a made-up X-Forwarded-For is no way around the limit
