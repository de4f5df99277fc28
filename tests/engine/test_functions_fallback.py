"""Where a function cannot run, the same script by EVALSHA does (engine/core/functions.py):
- at maxmemory a function that may write is refused before it runs, where by EVALSHA a call that
  writes nothing (a replay, a refusal) still answers: those calls go by EVALSHA there;
- a user whose ACL allows EVALSHA and SCRIPT LOAD but not FCALL (one written for earlier releases).

Each test runs with every script sent by EVALSHA (``evalsha``: the behaviour before scripts were
functions, and still on Redis 6.2 and clusters) and as functions (``fcall``); both must agree. Before
the fallback, the ``fcall`` runs raised RedisFull and NoPermissionError."""

import pytest
import redis

from ghostless import Engine, State
from ghostless.core.errors import Code
from ghostless.core.functions import LuaCall
from tests.conftest import register_test_types
from tests.support.redis_server import FullRedis


@pytest.fixture
def server(private_redis):
    return private_redis()


@pytest.fixture(params=["evalsha", "fcall"])
def engine(request, server):
    client = server.client()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    if request.param == "evalsha":
        for call in engine.scripts._scripts.values():
            call.fcall = False
    yield engine
    client.close()


@pytest.fixture
def full(server):
    """Makes the private Redis full (maxmemory 1 byte: every write refused) while active."""
    client = server.client()
    yield FullRedis(client)
    client.close()


def test_an_idempotent_resubmit_on_a_full_redis_finds_its_task(engine, full):
    """A client whose submit reply was lost resends it with its idempotency key: the script only
    reads (HMGET of the key) and answers REPLAYED with the task."""
    first = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="order-1")
    with full:
        again = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="order-1")
    assert again.id == first.id and again.replayed


def test_a_resent_complete_on_a_full_redis_answers_replayed(engine, full):
    """A work-horse resends complete after a lost reply (ride_out_redis_restarts): REPLAYED, a read."""
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    assert engine.complete(lease, {"ok": True}) == State.SUCCESS
    with full:
        assert engine.complete(lease, {"ok": True}) == State.SUCCESS


@pytest.mark.parametrize("via", ["evalsha", "fcall"])
def test_fcall_refused_by_acl_falls_back_like_a_server_without_functions(server, via):
    """A least-privilege ACL written for the EVALSHA release (EVALSHA and SCRIPT LOAD, no FCALL or
    FUNCTION): every call now raises redis-py's raw NoPermissionError instead of going by EVALSHA."""
    admin = server.client()
    admin.acl_setuser(
        "app",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-@scripting", "+evalsha", "+eval", "+script|load", "+script|exists"],
    )
    client = redis.Redis(port=admin.connection_pool.connection_kwargs["port"], username="app", password="pw")
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    if via == "evalsha":
        for call in engine.scripts._scripts.values():
            call.fcall = False
    try:
        task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
        assert engine.get(task.id).status == State.PENDING
    finally:
        client.close()
        admin.close()


def test_a_sweeper_batch_on_a_full_redis_still_answers_its_calls_that_write_nothing(engine, full):
    """A batch (Scripts.pipeline, as the sweeper sends one): an expire of a lease not yet due."""
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    engine.claim(task.id, "w1")
    with full:
        pipe = engine.scripts.pipeline()
        engine.scripts.expire(engine.keys.task(task.id), task.id, client=pipe)
        (reply,) = engine.scripts.replies(pipe)
    assert reply == [Code.NOT_DUE]


def test_a_library_redis_rejects_is_raised_not_hidden(server):
    """Only a server without functions (or a user without them) sends a script by EVALSHA for good:
    a library Redis refuses to compile is an error of the release, raised to the caller."""
    client = server.client()
    call = LuaCall(client, "read")
    call.library = call.library.replace("local function main()", "local function main(")
    with pytest.raises(redis.ResponseError, match=r"(?i)error compiling|syntax"):
        call(["k"], [])
    assert call.fcall
    client.close()
