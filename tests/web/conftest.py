"""Fixtures for the web tests: an app on the ``engine`` fixture (fakeredis and a real
redis-server), a test client, and three users: alice and bob (users) and root (admin)."""

from __future__ import annotations

import pytest

from ghostless.web import close_app, create_app

TEST_CONFIG = {
    "TESTING": True,
    "SECRET_KEY": "test-secret",
    "GHOSTLESS_SSE_KEEPALIVE": 0.05,  # a streaming test's read never blocks longer than this
    "GHOSTLESS_BROKER_BLOCK_MS": 50,  # how soon the reader notices new queues and stops
    "GHOSTLESS_LONGPOLL_MAX": 5.0,
    "GHOSTLESS_READY_SWEEPER_AGE": 0,  # no sweeper runs here: tests/web/test_ops_metrics.py turns it on
}


@pytest.fixture
def make_app(engine):
    made = []

    def make(**config):
        app = create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine, **config})
        made.append(app)
        return app

    yield make
    for app in made:
        close_app(app)


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def tokens(engine) -> dict[str, str]:
    return {
        "alice": engine.users.add("alice"),
        "bob": engine.users.add("bob"),
        "root": engine.users.add("root", admin=True),
    }


@pytest.fixture
def auth(tokens):
    """``auth["alice"]``: headers authenticating as alice; ``auth["none"]``: none at all."""
    headers = {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
    headers["none"] = {}
    return headers
