"""The web's coalesced reads (web/coalesce.py): the reads of many concurrent requests (a token's
user, a task's snapshot) go to Redis in one pipeline, each caller gets its own answer or error,
and a stuck or failing Redis answers every caller in time rather than hanging one."""

from __future__ import annotations

import os
import threading

import pytest
import redis

from ghostless import Engine, State
from ghostless.web import coalesce, queries as wq
from ghostless.web.coalesce import CoalescedScripts, Coalescer
from ghostless.web.pool import bounded_engine
from tests.conftest import register_test_types
from tests.support.lua import forget_lua
from tests.support.wait import wait_until

from .helpers import task_in


def _in_threads(target, args_list) -> tuple[list, list[threading.Thread]]:
    """Start ``target(*args)`` per args in a thread each: (their results or errors, the threads)."""
    out = [None] * len(args_list)

    def run(i, args):
        try:
            out[i] = target(*args)
        except Exception as e:  # noqa: BLE001 - the caller asserts on it
            out[i] = e

    threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    return out, threads


def _join(threads) -> None:
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_the_web_reads_users_and_snapshots_through_coalescers_and_batch_0_turns_them_off(make_app):
    web = make_app().extensions["ghostless"].engine
    assert isinstance(web.scripts, CoalescedScripts) and web.users.scripts is web.scripts
    credentials, snapshots = web.scripts.credentials, web.scripts.snapshots
    assert credentials is not snapshots and credentials.client is snapshots.client is web.redis
    assert credentials.limit == snapshots.limit == 200
    plain = make_app(GHOSTLESS_REDIS_BATCH=0).extensions["ghostless"].engine
    assert not isinstance(plain.scripts, CoalescedScripts)


def test_reads_queued_while_a_pipeline_waits_go_in_the_next_one_and_each_caller_gets_its_own(engine, tokens):
    web = bounded_engine(engine, 1, 10.0)
    credentials, snapshots = web.scripts.credentials, web.scripts.snapshots
    tasks = [task_in(engine, State.PENDING, owner=name) for name in ("alice", "bob") * 10]
    held = web.redis.connection_pool.get_connection()  # each sender's first pipeline waits for it

    def snapshot(task):
        return wq.snapshot(web, task.id, task.owner)

    try:
        first, threads = _in_threads(web.users.authenticate, [(tokens["root"],)])
        wait_until(lambda: credentials._sender is not None and not credentials._queue, what="the first read taken")
        first_snap, more = _in_threads(snapshot, [(tasks[0],)])
        threads += more
        wait_until(lambda: snapshots._sender is not None and not snapshots._queue, what="the first snapshot taken")
        snaps, more = _in_threads(snapshot, [(t,) for t in tasks[1:]])
        threads += more
        sent = [tokens["alice"], tokens["bob"], "gl_not-a-token-of-anyone"]
        users, more = _in_threads(web.users.authenticate, [(token,) for token in sent])
        threads += more
        wait_until(lambda: len(snapshots._queue) == len(tasks) - 1, what="every other snapshot queued")
        wait_until(lambda: len(credentials._queue) == 3, what="every other credential queued")
    finally:
        web.redis.connection_pool.release(held)
    _join(threads)
    assert first[0].name == "root" and first[0].admin
    snaps = first_snap + snaps
    assert [(s[0].id, s[0].owner) for s in snaps] == [(t.id, t.owner) for t in tasks]
    assert all(s[1][-1].to == "PENDING" for s in snaps)  # each with its own history
    assert [u and u.name for u in users] == ["alice", "bob", None]
    # Each: the first read alone, then the ones queued behind it together.
    assert (credentials.pipelines, snapshots.pipelines) == (2, 2)


def test_another_owners_task_stays_hidden_when_read_in_the_same_pipeline_as_the_owners(engine):
    web = bounded_engine(engine, 2, 10.0)
    task = task_in(engine, State.PENDING, owner="alice")
    out, threads = _in_threads(lambda owner: wq.snapshot(web, task.id, owner), [("bob",), ("alice",)] * 20)
    _join(threads)
    assert [s[0] is None for s in out] == [True, False] * 20


def test_a_commands_own_error_goes_to_its_caller_only(engine):
    coalescer = Coalescer(engine.redis, timeout=10.0, limit=10)
    engine.redis.hset("t:a-hash", "f", "v")
    engine.redis.set("t:a-string", "x")
    calls = [("GET", "t:a-hash"), ("GET", "t:a-string")] * 5
    out, threads = _in_threads(coalescer.execute, calls)
    _join(threads)
    assert all(isinstance(r, redis.ResponseError) and "WRONGTYPE" in str(r) for r in out[::2])
    assert set(out[1::2]) == {b"x"}


def test_a_script_the_server_has_forgotten_is_loaded_and_answered(engine, tokens):
    web = bounded_engine(engine, 2, 10.0)
    forget_lua(web.redis)
    assert web.users.authenticate(tokens["alice"]).name == "alice"
    assert web.scripts.credentials.pipelines == 1


def test_a_pipeline_that_cannot_get_a_connection_in_time_raises_to_every_caller_in_it(engine, tokens):
    web = bounded_engine(engine, 1, 0.2)
    held = web.redis.connection_pool.get_connection()
    try:
        out, threads = _in_threads(web.users.authenticate, [(tokens["alice"],)] * 5)
        _join(threads)
    finally:
        web.redis.connection_pool.release(held)
    assert all(isinstance(e, redis.ConnectionError) for e in out), out
    assert web.users.authenticate(tokens["alice"]).name == "alice"  # and it serves again once one is free


def test_a_read_not_answered_in_time_raises_a_timeout_and_later_reads_are_served(engine, tokens):
    web = bounded_engine(engine, 1, 10.0)
    web.scripts.credentials.timeout = 0.1
    held = web.redis.connection_pool.get_connection()
    try:
        with pytest.raises(redis.TimeoutError, match=r"not answered within 0\.1s"):
            web.users.authenticate(tokens["alice"])
    finally:
        web.redis.connection_pool.release(held)
    web.scripts.credentials.timeout = 10.0
    assert web.users.authenticate(tokens["bob"]).name == "bob"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_reads_through_a_sender_of_its_own(redis_server):
    client = redis_server.client()
    client.flushall()
    user_engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    tokens = {name: user_engine.users.add(name) for name in ("alice", "bob")}
    web = bounded_engine(user_engine, 2, 10.0)
    assert web.users.authenticate(tokens["alice"]).name == "alice"  # the parent's sender runs
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: its answer through the pipe, then out
        try:
            user = web.users.authenticate(tokens["bob"])
            os.write(write, (user.name if user else "none").encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as answer:
            assert answer.read() == "bob"
    finally:
        os.waitpid(pid, 0)
        client.close()


def test_a_cookie_sessions_read_goes_through_the_coalescer_of_the_webs_engine(app, engine, tokens):
    client = app.test_client()
    assert client.post("/login", data={"token": tokens["alice"]}).status_code in (302, 303)
    web = app.extensions["ghostless"].engine
    before = web.scripts.credentials.pipelines
    assert client.get("/api/me").get_json()["user"] == "alice"
    assert web.scripts.credentials.pipelines == before + 2  # the session's GET, then the token's user
    assert coalesce.read(engine, "GET", "t:nothing-here") is None  # an engine without one: sent alone


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the stopped sender's exit
def test_a_stopped_sender_is_replaced_by_the_next_call_and_its_callers_are_answered(engine, tokens):
    web = bounded_engine(engine, 2, 10.0)
    coalescer = web.scripts.credentials
    assert web.users.authenticate(tokens["alice"]).name == "alice"
    stopped = coalescer._sender

    def stop(batch):
        raise SystemExit("stopped")  # what a killed greenlet raises: a BaseException

    real, coalescer._send = coalescer._send, stop
    with pytest.raises(redis.ConnectionError, match="sender stopped"):
        web.users.authenticate(tokens["alice"])
    wait_until(lambda: not stopped.is_alive(), what="the sender to stop")
    coalescer._send = real
    assert web.users.authenticate(tokens["bob"]).name == "bob"  # a new sender
    assert coalescer._sender is not stopped and coalescer._sender.is_alive()


def test_each_caller_of_a_failed_pipeline_gets_its_own_error_object(engine):
    coalescer = Coalescer(engine.redis, timeout=10.0, limit=50)

    def fail(batch):
        raise redis.ConnectionError("down")

    coalescer._send = fail
    out, threads = _in_threads(coalescer.execute, [("GET", "t:x")] * 20)
    _join(threads)
    assert all(isinstance(e, redis.ConnectionError) and str(e) == "down" for e in out)
    assert len({id(e) for e in out}) == len(out)  # no one traceback gathering every caller's frames


def test_reads_whose_callers_stopped_waiting_are_not_sent(engine, tokens):
    web = bounded_engine(engine, 1, 10.0)
    coalescer = web.scripts.credentials
    held = web.redis.connection_pool.get_connection()
    try:
        first, threads = _in_threads(web.users.authenticate, [(tokens["root"],)])
        wait_until(lambda: coalescer._sender is not None and not coalescer._queue, what="the first read taken")
        coalescer.timeout = 0.05  # for the calls from now on (the first waits 10 s)
        late, more = _in_threads(web.users.authenticate, [(tokens["alice"],)] * 5)
        _join(more)
        assert all(isinstance(e, redis.TimeoutError) for e in late)
    finally:
        web.redis.connection_pool.release(held)
    _join(threads)
    assert first[0].name == "root"
    coalescer.timeout = 10.0
    assert web.users.authenticate(tokens["bob"]).name == "bob"
    assert coalescer.pipelines == 2  # the first read, then bob's: the five abandoned ones were never sent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_thread_holds_the_coalescers_lock_still_reads(redis_server):
    client = redis_server.client()
    client.flushall()
    client.set("t:k", "v")
    coalescer = Coalescer(client, timeout=5.0, limit=10)
    assert coalescer.execute("GET", "t:k") == b"v"
    with coalescer._wake:  # held by this thread at the fork: in the child, nobody would ever release it
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.write(write, coalescer.execute("GET", "t:k") or b"none")
            finally:
                os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as answer:
            assert answer.read() == b"v"
    finally:
        os.waitpid(pid, 0)
        client.close()


def test_an_idle_sender_ends_and_the_next_read_starts_another(engine):
    coalescer = Coalescer(engine.redis, timeout=10.0, limit=10, idle=1.0)  # outlasts a loaded host's pause
    engine.redis.set("t:a-string", "x")
    assert coalescer.execute("GET", "t:a-string") == b"x"
    first = coalescer._sender
    assert first is not None
    wait_until(lambda: not first.is_alive(), 5.0, what="the idle sender to end")  # no thread left per coalescer
    assert coalescer.execute("GET", "t:a-string") == b"x"
    assert coalescer._sender is not first and coalescer._sender.is_alive()
