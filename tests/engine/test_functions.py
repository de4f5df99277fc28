"""Scripts as Redis Functions (engine/core/functions.py, lua_source.library): every library loads,
read-only ones are flagged so, and a library's state does not leak from one call to the next (a
library keeps its top-level locals between calls, where EVAL built them afresh)."""

from __future__ import annotations

import re

import fakeredis
import pytest

from ghostless import Engine
from ghostless.core.cluster import is_cluster
from ghostless.core.lua_source import CALL_STATE, LIBS, READ_ONLY, SCRIPTS, _lib_text, library
from tests.support.lua import forget_lua, function_loaded, loaded


@pytest.fixture
def server(redis_client):
    """One server: on a cluster a primary (its calls go by EVALSHA, but a library loads there too)."""
    if is_cluster(redis_client):
        return redis_client.get_redis_connection(redis_client.get_primaries()[0])
    return redis_client


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_loads_as_a_function_library_named_for_its_text(server, name):
    fname, text = library(name)
    assert re.fullmatch(rf"gl_{name}_[0-9a-f]{{16}}", fname)
    assert server.function_load(text, replace=True) == fname.encode()
    assert function_loaded(server, name)


def test_the_read_only_scripts_and_only_they_are_flagged_no_writes(server):
    """no-writes: they run on a replica and at maxmemory, by FCALL_RO; a writing one may not."""
    for name in SCRIPTS:
        server.function_load(library(name)[1], replace=True)
    flagged = set()
    for lib in server.function_list("gl_*"):
        (function,) = dict(zip(lib[::2], lib[1::2]))[b"functions"]
        fields = dict(zip(function[::2], function[1::2]))
        if b"no-writes" in fields[b"flags"]:
            flagged.add(fields[b"name"].decode().split("_")[1])
    assert flagged == READ_ONLY
    with pytest.raises(Exception, match=r"(?i)write flag|no-writes|not allowed"):
        server.execute_command("FCALL_RO", library("submit")[0], 0)


def test_every_lib_local_a_call_changes_is_reset_by_every_call():
    """A top-level local of lua/lib assigned (or changed in place) inside a function must start each
    call from its value in CALL_STATE, or one call's value would be the next call's."""
    changed = set()
    for lib in LIBS:
        text = _lib_text(lib)
        for var in re.findall(r"^local (\w+)\s*=", text, re.M):
            if re.search(rf"^\s+{var}\s*=[^=]|^\s+{var}\[[^\]]*\]\s*=[^=]|table\.(insert|remove)\({var}\b", text, re.M):
                changed.add(var)
    assert changed == set(CALL_STATE)


def test_a_call_that_ends_a_parent_does_not_mark_the_next_call_for_resolving(engine):
    """record.lua's RESOLVE_DUE: a complete that ends a task others wait on asks the engine to look
    at the waiting set; the next complete, of a task nobody waits on, must not ask again."""
    resolves = []
    engine.scripts.on_resolve = resolves.append
    parent = engine.submit("render", {}, owner="alice")
    engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    alone = engine.submit("render", {}, owner="alice")
    engine.complete(engine.claim(parent.id, "w1"), None)
    assert len(resolves) == 1
    engine.complete(engine.claim(alone.id, "w1"), None)
    assert len(resolves) == 1


def test_a_flushed_library_is_loaded_again_by_the_call_that_needs_it(engine):
    task = engine.submit("render", {}, owner="alice")
    forget_lua(engine.redis)
    lease = engine.claim(task.id, "w1")
    assert lease.token == 1
    assert loaded(engine, "claim") and not loaded(engine, "complete")


def test_prune_deletes_other_releases_libraries_and_keeps_its_own_and_everyone_elses(engine):
    server = engine.redis
    if is_cluster(server):
        server = server.get_redis_connection(server.get_primaries()[0])
    engine.scripts.ensure_loaded()
    fname, text = library("claim")
    old = "gl_claim_" + "0" * 16  # an older release's claim
    server.function_load(text.replace(fname, old), replace=True)
    server.function_load(
        "#!lua name=gl_mine\nredis.register_function('gl_mine', function() return 1 end)", replace=True
    )
    assert old in engine.scripts.prune_libraries()
    names = {e[1].decode() for e in server.function_list("gl_*")}
    assert old not in names and "gl_mine" in names
    if not is_cluster(engine.redis):
        assert fname in names and len(names) == len(SCRIPTS) + 1
    assert engine.scripts.prune_libraries() == []
    server.function_delete("gl_mine")


def test_prune_on_a_server_without_functions_deletes_nothing():
    engine = Engine(fakeredis.FakeRedis(version=(6, 2)), namespace="t", dispatcher=None)
    assert engine.scripts.prune_libraries() == []
