"""/readyz and /metrics of a web process that saw Redis lose its data (restarted without
persistence): a 503 with a JSON reason and a gauge at 1, while /healthz still says the process
is up."""

import pytest

from ghostless import Engine
from ghostless.web import close_app, create_app
from tests.conftest import register_test_types

from .conftest import TEST_CONFIG


@pytest.fixture
def server(private_redis):
    return private_redis()


def test_readyz_and_metrics_report_a_redis_that_lost_its_data(server):
    client = server.client(socket_timeout=5)
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    app = create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine, "GHOSTLESS_METRICS_PUBLIC": True})
    try:
        http = app.test_client()
        assert http.get("/readyz").status_code == 200  # the first look writes the marker
        assert "ghostless_redis_data_lost 0.0" in http.get("/metrics").get_data(as_text=True)
        server.restart()
        r = http.get("/readyz")
        assert r.status_code == 503
        assert r.get_json()["error"]["code"] == "redis_data_lost"
        assert "ghostless_redis_data_lost 1.0" in http.get("/metrics").get_data(as_text=True)
        assert http.get("/healthz").status_code == 200
    finally:
        close_app(app)
        client.close()
