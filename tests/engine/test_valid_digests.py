"""Users.valid_digests: which of many token digests still belong to a user, in two pipelined round
trips however many (web/guard.py asks it for every open stream once a second)."""

from __future__ import annotations

from ghostless.core.users import token_digest
from tests.support.commands import sent_commands


def test_only_the_digests_of_live_tokens_are_valid(engine):
    alice, bob = engine.users.add("alice"), engine.users.add("bob")
    digests = [token_digest(t) for t in (alice, bob, "not-a-token-at-all")]
    assert engine.users.valid_digests(digests) == {digests[0], digests[1]}
    engine.users.revoke("bob")
    assert engine.users.valid_digests(digests) == {digests[0]}
    assert engine.users.valid_digests([]) == set()


def test_many_digests_cost_two_round_trips(engine, monkeypatch):
    tokens = [engine.users.add(f"user{i}") for i in range(300)]
    sent = sent_commands(monkeypatch, engine.redis)
    assert len(engine.users.valid_digests([token_digest(t) for t in tokens])) == 300
    assert sent == ["HMGET", "HMGET"]
