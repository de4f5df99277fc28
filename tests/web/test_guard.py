"""web/guard.py: one thread per process ends the streams whose client left or whose credential
is gone, asking for all open streams at once instead of each stream waking to ask."""

from __future__ import annotations

import socket
import threading

import pytest

from ghostless.core.users import token_digest
from ghostless.web.broker import Dropped, Subscriber
from ghostless.web.guard import StreamGuard


@pytest.fixture
def pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    yield server, client
    server.close()
    client.close()


def ended(sub: Subscriber) -> bool:
    try:
        sub.next(0)
    except Dropped:
        return True
    return False


def test_a_stream_whose_client_closed_is_ended_and_a_live_one_is_not(engine, pair):
    server, client = pair
    guard = StreamGuard(engine)
    digest = token_digest(engine.users.add("alice"))
    live, leaving = Subscriber(10), Subscriber(10)
    other_server, other_client = socket.socketpair()
    try:
        guard.watch(live, {"gunicorn.socket": other_server}, (digest, None))
        guard.watch(leaving, {"gunicorn.socket": server}, (digest, None))
        assert guard.check_clients() == 0 and not ended(live) and not ended(leaving)
        client.close()
        assert guard.check_clients() == 1
        assert ended(leaving) and not ended(live)
    finally:
        other_server.close()
        other_client.close()


def test_streams_of_a_revoked_token_or_an_ended_session_are_ended_the_others_go_on(engine):
    guard = StreamGuard(engine)
    alice, bob = token_digest(engine.users.add("alice")), token_digest(engine.users.add("bob"))
    engine.redis.set("t:session:s1", alice)
    subs = {name: Subscriber(10) for name in ("alice", "alice-cookie", "bob")}
    guard.watch(subs["alice"], {}, (alice, None))
    guard.watch(subs["alice-cookie"], {}, (alice, "t:session:s1"))
    guard.watch(subs["bob"], {}, (bob, None))
    assert guard.check_credentials() == 0
    engine.redis.delete("t:session:s1")  # logged out in another tab
    assert guard.check_credentials() == 1
    assert ended(subs["alice-cookie"]) and not ended(subs["alice"]) and not ended(subs["bob"])
    engine.users.revoke("bob")
    assert guard.check_credentials() == 2  # bob's, and the logged-out one (still watched until it closes)
    assert ended(subs["bob"]) and not ended(subs["alice"])


def test_a_thousand_streams_cost_a_handful_of_round_trips(engine, monkeypatch):
    guard = StreamGuard(engine)
    for i in range(1000):
        guard.watch(Subscriber(10), {}, (token_digest(engine.users.add(f"u{i}")), f"t:session:{i}"))
    calls = []
    me = threading.get_ident()  # the patch is on the client class: count this thread's calls only,
    # not the rounds the guard's own thread makes meanwhile (it did, in CI under load)

    def count(name):
        if threading.get_ident() == me:
            calls.append(name)

    real = type(engine.redis).execute_command
    monkeypatch.setattr(type(engine.redis), "execute_command", lambda self, *a, **k: count(a[0]) or real(self, *a, **k))
    real_pipe = type(engine.redis.pipeline()).execute
    monkeypatch.setattr(
        type(engine.redis.pipeline()), "execute", lambda self, *a, **k: count("PIPELINE") or real_pipe(self, *a, **k)
    )
    assert guard.check_credentials() == 1000  # no session key exists: every cookie stream ends
    guard.close()
    assert len(calls) <= 6


def test_an_unwatched_stream_is_not_looked_at(engine):
    guard = StreamGuard(engine)
    sub = Subscriber(10)
    handle = guard.watch(sub, {}, ("no-such-digest", None))
    guard.unwatch(handle)
    assert guard.watching() == 0 and guard.check_credentials() == 0 and not ended(sub)
