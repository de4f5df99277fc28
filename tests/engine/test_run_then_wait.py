"""cluster.run_then_wait's resends: a script loaded after NOSCRIPT is always sent once more.

Seen in the cluster failover soak: two sends found the killed primary unreachable, the third
reached the promoted replica, whose script cache was empty, and its NOSCRIPT reached the caller
as an error (a submit thread died on it) although the script had just been loaded there."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError, NoScriptError

from ghostless.core import cluster
from ghostless.core.cluster import ATTEMPTS, run_then_wait
from ghostless.core.functions import LuaCall


class FakeScript:
    """A script call's script: only its reading of a reply matters here (a NOSCRIPT is missing)."""

    missing = staticmethod(LuaCall.missing)

    def fallback(self, reply):
        return None


class FakeLua:
    """Each send answers with the next of ``answers``: a _NotSent is raised (the owner was not
    reached), anything else is the call's reply (an error in place, as a pipeline gives it)."""

    def __init__(self, answers):
        self.answers, self.sends, self.loads = list(answers), 0, 0

    def send(self, server, calls, asking, wait):
        self.sends += 1
        answer = self.answers.pop(0)
        if isinstance(answer, cluster._NotSent):
            raise answer
        return [answer, 1]

    def load(self, server, script):
        self.loads += 1
        return script


class FakeCluster:
    class nodes_manager:  # the attribute redis-py's cluster client has
        @staticmethod
        def initialize():
            pass


@pytest.fixture
def one_owner(monkeypatch):
    """A 'cluster' whose one owner is the client itself (no connection to check)."""
    client = FakeCluster()
    monkeypatch.setattr(cluster, "_owners", lambda c, pending, calls, ask: iter([(c, False, pending)]))
    return client


def test_after_two_unreachable_sends_a_noscript_is_loaded_and_sent_again(one_owner):
    unreachable = cluster._NotSent(RedisConnectionError("refused"))
    lua = FakeLua([unreachable, unreachable, NoScriptError("NOSCRIPT"), "OK"])
    replies, acked = run_then_wait(one_owner, [(FakeScript(), ["k"], [])], ("WAIT", 1, 100), lua)
    assert replies == ["OK"] and acked == 1 and lua.loads == 1 and lua.sends == 4


def test_a_server_that_never_keeps_the_script_is_sent_to_a_bounded_number_of_times(one_owner):
    lua = FakeLua([NoScriptError("NOSCRIPT")] * (2 * ATTEMPTS + 5))
    replies, acked = run_then_wait(one_owner, [(FakeScript(), ["k"], [])], ("WAIT", 1, 100), lua)
    assert isinstance(replies[0], NoScriptError) and acked is None and lua.sends == 2 * ATTEMPTS


def test_an_owner_unreachable_on_every_send_raises_its_connection_error(one_owner):
    unreachable = cluster._NotSent(RedisConnectionError("refused"))
    lua = FakeLua([unreachable] * (2 * ATTEMPTS))
    with pytest.raises(RedisConnectionError):
        run_then_wait(one_owner, [(FakeScript(), ["k"], [])], ("WAIT", 1, 100), lua)
    assert lua.sends == ATTEMPTS
