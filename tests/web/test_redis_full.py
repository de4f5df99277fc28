"""The API on a full Redis (maxmemory reached under noeviction): a refused write is a 503 with a
JSON body and Retry-After, never a 500."""

import pytest

from ghostless import Engine
from ghostless.web import close_app, create_app
from tests.conftest import register_test_types

from .conftest import TEST_CONFIG


@pytest.fixture
def server(private_redis):
    return private_redis()


def test_a_submit_refused_by_a_full_redis_is_a_503_redis_full_with_retry_after(server):
    client = server.client()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    token = engine.users.add("alice")
    app = create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine})
    try:
        http = app.test_client()
        headers = {"Authorization": f"Bearer {token}"}
        client.config_set("maxmemory", 1)
        try:
            r = http.post("/api/tasks", json={"type": "render", "args": {"prompt": "a cat"}}, headers=headers)
        finally:
            client.config_set("maxmemory", 0)
        assert r.status_code == 503, r.get_data(as_text=True)
        assert r.get_json()["error"]["code"] == "redis_full"
        assert int(r.headers["Retry-After"]) > 0
    finally:
        close_app(app)
        client.close()
