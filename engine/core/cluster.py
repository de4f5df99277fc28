"""What the core does differently on a Redis Cluster client (redis.cluster.RedisCluster).

Every script's keys share one queue's hash tag (engine/core/keys.py), so each script runs on one
shard. redis-py's cluster pipeline refuses EVALSHA; ``ScriptBatch`` sends a batch of script calls
through it as raw commands instead (one round trip per shard; on one Redis through its pipeline),
and runs a script again through its call where a server lacks it (NOSCRIPT: a replica promoted
after a failover has an empty script cache), which loads it there.

A write that waits for replicas (``Config.wait_replicas``) needs its WAIT on the connection that
ran the script, which the cluster client cannot give (it sends a keyless WAIT to any node):
``run_then_wait`` routes the scripts and their WAIT itself, in one pipeline on one connection to
each slot owner (scripts.py, the one place that runs Lua, sends the pipeline: ``Lua``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ConnectionError as RedisConnectionError,
    MovedError,
    TimeoutError as RedisTimeoutError,
)


class Script(Protocol):
    """One script as the runners send it (engine/core/functions.py LuaCall)."""

    def command(self, keys: Sequence, args: Sequence) -> tuple:
        """The command that runs it."""

    def missing(self, reply) -> bool:
        """Whether ``reply`` says it did not run because its server lacks it."""

    def fallback(self, reply) -> Script | None:
        """The call to send instead when ``reply`` refused it before it ran, else None."""

    def __call__(self, keys: Sequence = (), args: Sequence = (), client=None) -> Any:
        """Its reply, run alone (loaded first where missing)."""


#: (script, keys, args): one script call; its first key names the slot it runs on
Call = tuple[Script, Sequence, Sequence]
#: sends of a call whose reply shows it did not run (NOSCRIPT, MOVED, ASK, an unreachable owner)
ATTEMPTS = 3


class Lua(Protocol):
    """How ``run_then_wait`` runs Lua on one server (scripts.py gives it: the one place that does)."""

    def send(self, server, calls: list[Call], asking: bool, wait: tuple) -> list:
        """One pipeline on ``server`` (one connection, in order, no MULTI): each call (after
        ASKING when ``asking``) then ``wait``; the calls' replies then WAIT's, errors in place."""

    def load(self, server, script: Script) -> Script:
        """Load ``script`` into ``server``; the call to send again there (``script``, or the same
        script sent another way)."""


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster client (keys spread over shards by slot), of
    redis-py or of redis.asyncio."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


class ScriptBatch:
    """Script calls queued for a client (``script(keys, args, client=batch)`` adds one);
    ``execute`` runs them all in one pipeline (on a cluster one per shard) and returns their replies
    in order (the first error raised after every call ran, as a pipeline does). A call its server
    lacked is loaded and run again after the others: the only case where calls run out of order."""

    def __init__(self, client, lua: Lua):
        self._client, self._lua = client, lua
        self._calls: list[Call] = []

    def add_call(self, script: Script, keys: Sequence, args: Sequence) -> ScriptBatch:
        self._calls.append((script, keys, args))
        return self

    def execute(self) -> list:
        calls, self._calls = self._calls, []
        pipe = self._client.pipeline() if is_cluster(self._client) else self._client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.execute_command(*script.command(keys, args))
        replies = pipe.execute(raise_on_error=False) if calls else []
        out = []
        for (script, keys, args), reply in zip(calls, replies):
            again = script if script.missing(reply) else script.fallback(reply)
            out.append(reply if again is None else again(keys=keys, args=args))  # loads it where missing
        return _raising_first(out)

    def execute_then_wait(self, wait: tuple) -> tuple[list, int | None]:
        """``execute``, each shard's calls followed by ``wait`` on their connection: (replies, the
        fewest replicas a shard's WAIT counted; None when nothing ran)."""
        calls, self._calls = self._calls, []
        replies, acked = run_then_wait(self._client, calls, wait, self._lua)
        return _raising_first(replies), acked


def _raising_first(replies: list) -> list:
    error = next((r for r in replies if isinstance(r, Exception)), None)
    if error is not None:
        raise error
    return replies


def run_then_wait(client, calls: Sequence[Call], wait: tuple, lua: Lua) -> tuple[list, int | None]:
    """Run ``calls`` then ``wait`` (the WAIT command) on one connection per server: the client's
    on one Redis; on a cluster a connection to the primary that owns each call's slot, the calls
    of one owner in one pipeline ended by its WAIT (WAIT counts the writes of its own connection).
    Returns the replies in order (errors in place) and the fewest replicas a WAIT counted after
    calls that ran (None when none ran).

    A call is sent again only where nothing ran, ``ATTEMPTS`` times in all, and once more after each
    NOSCRIPT or missing function (the script is loaded on that server first: a promoted replica's
    script cache is empty) or a function refused at maxmemory (sent by EVALSHA instead: at most
    2 x ATTEMPTS sends), MOVED (the slot map takes the new owner it names), ASK (sent to the
    node named, after ASKING: a slot being migrated), or an owner that could not be reached before
    anything was sent (the slot map is refreshed: after a failover its replica may serve the slot).
    TRYAGAIN (a multi-key script while its slot's keys are being migrated) is raised, as other
    errors are. A connection lost after sending is raised, the slot map refreshed for the next
    call: the script may have run, and a state-changing script is never sent twice on a guess.
    """
    calls = list(calls)  # a call may be sent again another way (Script.fallback, Lua.load)
    out: list[Any] = [None] * len(calls)
    pending, ask = list(range(len(calls))), dict[int, str]()
    acked: int | None = None
    attempt = sends = 0  # a resend after NOSCRIPT (its script loaded there) is no attempt of its own
    while True:
        sends += 1
        again: list[int] = []
        refresh = counted = False
        for server, asking, indexes in _owners(client, pending, calls, ask):
            try:
                if server is not client:
                    _reachable(server)
                *replies, count = lua.send(server, [calls[i] for i in indexes], asking, wait)
            except _NotSent as e:
                if attempt == ATTEMPTS - 1 or sends == 2 * ATTEMPTS:  # the last send
                    raise e.cause from None
                refresh = counted = True
                again += indexes
                continue
            except (RedisConnectionError, RedisTimeoutError):
                if server is not client:
                    client.nodes_manager.initialize()
                raise
            ran = False
            for i, reply in zip(indexes, replies):
                out[i] = reply
                ask.pop(i, None)
                script, keys, args = calls[i]
                if script.missing(reply):
                    calls[i] = (lua.load(server, script), keys, args)
                elif (twin := script.fallback(reply)) is not None:
                    calls[i] = (twin, keys, args)
                elif isinstance(reply, MovedError):  # before AskError: redis-py's MovedError is one
                    client.nodes_manager.move_slot(reply)
                    counted = True
                elif isinstance(reply, AskError):
                    ask[i] = f"{reply.host}:{reply.port}"
                    counted = True
                else:
                    ran = True
                    continue
                again.append(i)
            if ran:
                if isinstance(count, Exception):
                    raise count
                acked = int(count) if acked is None else min(acked, int(count))
        if refresh:
            client.nodes_manager.initialize()
        attempt += counted
        if not again or attempt >= ATTEMPTS or sends >= 2 * ATTEMPTS:
            break
        pending = again
    return out, acked


class _NotSent(Exception):
    """A connection to a slot owner failed (``cause``) before anything was sent on it."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


def _owners(client, pending: list[int], calls: Sequence[Call], ask: dict[int, str]):
    """(server, asking, call indexes) per server the pending calls go to."""
    if not is_cluster(client):
        yield client, False, pending
        return
    groups: dict[tuple[str, bool], list[int]] = {}
    for i in pending:
        name = ask.get(i) or client.get_node_from_key(calls[i][1][0]).name
        groups.setdefault((name, i in ask), []).append(i)
    for (name, asking), indexes in groups.items():
        node = client.get_node(node_name=name)
        if node is None:  # an ASK to a node the slot map does not know yet
            client.nodes_manager.initialize()
            node = client.get_node(node_name=name) or client.get_node_from_key(calls[indexes[0]][1][0])
        yield client.get_redis_connection(node), asking, indexes


def _reachable(server) -> None:
    """Take the connection a pipeline on a slot owner's client takes next: a dead owner refuses it
    before anything is sent (_NotSent)."""
    try:  # the pool hands the pipeline this same connection next (another thread may take it:
        # then a refusal comes from inside the pipeline and is raised, never resent)
        pool = server.connection_pool
        pool.release(pool.get_connection())
    except (RedisConnectionError, RedisTimeoutError) as e:
        raise _NotSent(e) from e
