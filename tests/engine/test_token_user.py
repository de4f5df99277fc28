"""Users.for_digest: the user a token names, read in one round trip (lua/user.lua). Every
authenticated request and every stream opening asks it, so a reconnect storm of 10,000 pages
asks it 10,000 times at once (bench/watchers.py)."""

from __future__ import annotations

from ghostless.core.cluster import is_cluster
from ghostless.core.users import token_digest
from tests.support.commands import sent_commands


def test_a_tokens_user_is_read_in_one_round_trip(engine, monkeypatch):
    token = engine.users.add("alice", admin=True)
    engine.users.authenticate(token)  # the script loaded (a web process loads it with its first request)
    sent = sent_commands(monkeypatch, engine.redis)
    user = engine.users.authenticate(token)
    assert (user.name, user.admin, user.tokens) == ("alice", True, 1)
    assert sent == ["EVALSHA" if is_cluster(engine.redis) else "FCALL_RO"]  # a read-only function


def test_only_a_token_its_users_record_still_lists_names_the_user(engine):
    alice, bob = engine.users.add("alice"), engine.users.add("bob")
    assert engine.users.authenticate(bob).name == "bob"
    engine.users.revoke("bob")
    assert engine.users.authenticate(bob) is None
    assert engine.users.authenticate(alice).name == "alice"
    # A tokens entry that the record does not list (left behind) names nobody.
    stale = token_digest("gl_left-behind-token")
    engine.redis.hset(engine.keys.tokens(), stale, "alice")
    assert engine.users.for_digest(stale) is None
    # Nor does an entry whose user has no record.
    engine.redis.hset(engine.keys.tokens(), stale, "nobody")
    assert engine.users.for_digest(stale) is None
    assert engine.users.for_digest(token_digest("never-issued")) is None
