"""Web users submit under a quota (web/quotas.py): 429 with Retry-After past it; defaults on, per-user
overrides from the user's record; internal task types and ill-fitting args are refused."""

from __future__ import annotations

import pytest

from ghostless.core.quota import WEB_DEFAULT, Quota


def submit(client, headers, args=None, type="render"):
    return client.post(
        "/api/tasks", json={"type": type, "args": {"prompt": "a cat"} if args is None else args}, headers=headers
    )


def error(r) -> str:
    return r.get_json()["error"]["code"]


def test_web_users_submit_under_the_default_rate_and_get_a_429_with_retry_after_past_it(client, auth):
    assert WEB_DEFAULT.rate == 60 and WEB_DEFAULT.per == 60
    for n in range(60):
        assert submit(client, auth["alice"], {"prompt": str(n)}).status_code == 201
    r = submit(client, auth["alice"])
    assert (r.status_code, error(r)) == (429, "quota_exceeded")
    assert r.headers["Retry-After"] == "1"  # one submit a second refills the bucket
    assert "too many submits" in r.get_json()["error"]["message"]
    assert submit(client, auth["bob"]).status_code == 201  # bob's quota is his own


def test_web_users_have_a_lower_args_limit_than_python_callers(client, auth, engine):
    args = {"prompt": "x" * (100 << 10)}  # 100 KiB: over the web's 64 KiB, under Config's 1 MiB
    r = submit(client, auth["alice"], args)
    assert (r.status_code, error(r)) == (400, "invalid")
    assert "over the limit of 65536" in r.get_json()["error"]["message"]
    assert engine.submit("render", args, owner="alice").status.value == "PENDING"


def test_unfinished_tasks_past_the_limit_are_a_429_until_one_ends(make_app, auth, engine):
    client = make_app(GHOSTLESS_QUOTA={"max_unfinished": 2}).test_client()
    ids = [submit(client, auth["alice"]).get_json()["task"]["id"] for _ in range(2)]
    r = submit(client, auth["alice"])
    assert (r.status_code, error(r), r.headers["Retry-After"]) == (429, "quota_exceeded", "10")
    assert client.post(f"/api/tasks/{ids[0]}/cancel", headers=auth["alice"]).status_code == 200
    assert submit(client, auth["alice"]).status_code == 201


def test_a_users_own_limits_replace_the_defaults(make_app, auth, engine):
    engine.users.set_quota("alice", {"max_unfinished": 1})
    engine.users.set_quota("bob", {"max_unfinished": None, "rate": None})
    client = make_app(GHOSTLESS_QUOTA={"max_unfinished": 3, "rate": 3}).test_client()
    assert submit(client, auth["alice"]).status_code == 201
    assert submit(client, auth["alice"]).status_code == 429
    assert all(submit(client, auth["bob"], {"prompt": str(n)}).status_code == 201 for n in range(5))


def test_quotas_can_be_turned_off_for_the_app(make_app, auth):
    client = make_app(GHOSTLESS_QUOTA="off").test_client()
    assert all(submit(client, auth["alice"], {"prompt": str(n)}).status_code == 201 for n in range(61))


def test_an_edit_that_grows_past_the_byte_limit_is_a_429(make_app, auth):
    client = make_app(GHOSTLESS_QUOTA={"max_unfinished_bytes": 200}).test_client()
    task_id = submit(client, auth["alice"]).get_json()["task"]["id"]
    r = client.post(f"/api/tasks/{task_id}/edit", json={"args": {"prompt": "x" * 300}}, headers=auth["alice"])
    assert (r.status_code, error(r)) == (429, "quota_exceeded")


def test_a_bad_quota_setting_stops_the_app_from_starting(make_app):
    with pytest.raises(ValueError):
        make_app(GHOSTLESS_QUOTA={"max_unfinished": 0})
    with pytest.raises(ValueError):
        make_app(GHOSTLESS_QUOTA={"nonsense": 1})


def test_the_delivery_type_is_an_unknown_type_to_web_users(engine, make_app, auth):
    engine.enable_notifications("s3cret-for-tests-0123456789")
    client = make_app().test_client()
    r = submit(
        client, auth["alice"], {"url": "http://127.0.0.1:9/", "event": {"event": "terminal"}}, type="ghostless.notify"
    )
    assert (r.status_code, error(r)) == (400, "unknown_task_type")
    assert engine.list_tasks("alice")[0] == []


def test_args_that_do_not_fit_the_function_are_a_400_naming_them(client, auth):
    r = client.post("/api/tasks", json={"type": "draw", "args": {"promt": "a cat"}}, headers=auth["alice"])
    assert (r.status_code, error(r)) == (400, "invalid_args")
    assert "unexpected 'promt'" in r.get_json()["error"]["message"]


@pytest.fixture(autouse=True)
def _draw(engine):
    @engine.task(name="draw", queue="images")
    def draw(ctx, prompt):  # pragma: no cover - never run here
        return None


def test_quota_overrides_are_read_through_a_short_cache(make_app, auth, engine):
    client = make_app(GHOSTLESS_QUOTA={"max_unfinished": 1}, GHOSTLESS_QUOTA_CACHE=3600).test_client()
    assert submit(client, auth["alice"]).status_code == 201
    engine.users.set_quota("alice", {"max_unfinished": 5})
    assert submit(client, auth["alice"]).status_code == 429  # cached: the app's default still applies
    assert Quota(max_unfinished=5) == Quota().with_overrides(engine.users.quota_overrides("alice"))
