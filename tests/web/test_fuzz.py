"""No input produces a 5xx: Hypothesis-fuzzed bodies, headers, ids and query strings."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ghostless import State

from .helpers import task_in

# FUZZ_N=1000 for a deeper search; fixtures are shared by a test's examples (nothing here needs them fresh)
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_N", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.text(st.characters(categories=("Cs", "Ll", "Nd")), max_size=6),  # lone surrogates, as JSON allows
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
submit_bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["render", "quick", "brief", "nope", ""]) | json_values,
            "args": json_values | st.dictionaries(st.text(max_size=10), json_values, max_size=4),
            "idempotency_key": st.text(max_size=30) | json_values,
            "priority": st.integers() | json_values,
            "delay": st.floats(allow_nan=True) | json_values,
        },
    )
    | st.dictionaries(st.text(max_size=10), json_values, max_size=4)
    | json_values
)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=60)
path_ids = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="/?#%"), min_size=1, max_size=40
) | st.sampled_from(["images.0123456789abcdef0123", "..", "images.", "a" * 300])


@pytest.fixture
def alices_task(engine):
    """One task for all the examples of a test (fixtures are made once per test, not per example)."""
    return engine.submit("render", {"prompt": "p"}, owner="alice")


def assert_no_5xx(response):
    status = response.status_code
    assert status < 500, (status, response.get_data(as_text=True)[:300] if not response.is_streamed else "")
    if not response.is_streamed:
        body = response.get_json(silent=True)
        assert body is not None, "every answer is JSON"
        if status >= 400:
            assert set(body["error"]) == {"code", "message"}
    response.close()


@FUZZ
@given(body=submit_bodies)
def test_fuzzed_submit_bodies_never_cause_a_5xx(client, auth, body):
    r = client.post(
        "/api/tasks", data=json.dumps(body, allow_nan=True), content_type="application/json", headers=auth["alice"]
    )
    assert_no_5xx(r)
    assert r.status_code in (200, 201, 400, 409)


@FUZZ
@given(
    data=st.binary(max_size=300) | st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000]),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""]
    ),
)
def test_fuzzed_raw_bodies_never_cause_a_5xx(client, auth, data, content_type):
    for url in ("/api/tasks", "/api/tasks/images.0123456789abcdef0123/edit", "/login"):
        assert_no_5xx(client.post(url, data=data, content_type=content_type, headers=auth["alice"]))


@FUZZ
@given(body=json_values | st.fixed_dictionaries({"token": json_values}))
def test_fuzzed_json_logins_never_cause_a_5xx(client, body):
    assert_no_5xx(client.post("/login", data=json.dumps(body, allow_nan=True), content_type="application/json"))


@FUZZ
@given(task_id=path_ids, body=json_values)
def test_fuzzed_task_ids_never_cause_a_5xx(client, auth, task_id, body):
    for verb in ("cancel", "edit", "retry"):
        assert_no_5xx(client.post(f"/api/tasks/{task_id}/{verb}", json=body, headers=auth["alice"]))
    assert_no_5xx(client.get(f"/api/tasks/{task_id}", headers=auth["alice"]))
    assert_no_5xx(client.get(f"/api/tasks/{task_id}/events", headers=auth["alice"]))


@FUZZ
@given(authorization=header_text, last_event_id=header_text, csrf=header_text, origin=header_text, cookie=header_text)
def test_fuzzed_headers_never_cause_a_5xx(client, engine, auth, authorization, last_event_id, csrf, origin, cookie):
    headers = {
        "Authorization": authorization,
        "Last-Event-ID": last_event_id,
        "X-CSRF-Token": csrf,
        "Origin": origin,
        "Cookie": f"ghostless_session={cookie}",
    }
    assert_no_5xx(client.get("/api/tasks", headers=headers))
    assert_no_5xx(client.post("/api/tasks", json={"type": "render", "args": {}}, headers=headers))
    assert_no_5xx(client.post("/login", data={"token": authorization}, headers=headers))
    stream_headers = {**auth["alice"], "Last-Event-ID": last_event_id}
    assert_no_5xx(client.get("/api/events", headers=stream_headers, buffered=False))


@FUZZ
@given(
    query=st.dictionaries(
        st.sampled_from(["status", "type", "queue", "limit", "cursor", "owner", "version", "minutes", "last_event_id"]),
        st.text(max_size=30) | st.integers().map(str),
        max_size=5,
    ),
    wait=st.sampled_from([None, "", "x", "-1", "nan", "-inf", "0", "0.01", "1e-300", "²"]),
)
def test_fuzzed_query_strings_never_cause_a_5xx(client, auth, alices_task, query, wait):
    if wait is not None:  # long waits are fine but slow: the capped wait has its own test
        query["wait"] = wait
    for url in ("/api/tasks", f"/api/tasks/{alices_task.id}", "/api/stats"):
        for caller in ("alice", "root"):
            assert_no_5xx(client.get(url, query_string=query, headers=auth[caller]))


@pytest.mark.parametrize("state", [State.PROCESSING, State.SUCCESS])
@FUZZ
@given(last_event_id=header_text)
def test_fuzzed_last_event_ids_never_break_a_task_stream(client, engine, auth, state, last_event_id):
    task = task_in(engine, state)
    r = client.get(
        f"/api/tasks/{task.id}/events", headers={**auth["alice"], "Last-Event-ID": last_event_id}, buffered=False
    )
    assert r.status_code == 200
    chunks = iter(r.response)
    assert next(chunks).startswith(b"retry:")
    next(chunks, None)
    r.close()


def test_an_oversized_body_is_a_413_on_every_post(client, auth):
    big = b"{" + b" " * (2 << 20) + b"}"
    for url in ("/api/tasks", "/api/tasks/images.0123456789abcdef0123/edit", "/login"):
        r = client.post(url, data=big, content_type="application/json", headers=auth["alice"])
        assert (r.status_code, r.get_json()["error"]["code"]) == (413, "request_entity_too_large")
