"""What the core does differently on a Redis Cluster client (redis.cluster.RedisCluster).

Every script's keys share one queue's hash tag (engine/core/keys.py), so each script runs on one
shard. redis-py's cluster pipeline refuses EVALSHA; ``ScriptBatch`` sends a batch of script calls
through it as raw EVALSHA commands instead (one round trip per shard), and runs a script again
through its Script object where a shard lacks it (NOSCRIPT: a replica promoted after a failover
has an empty script cache), which loads it there.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster client (keys spread over shards by slot), of
    redis-py or of redis.asyncio."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def batch(client, scripts: Iterable[Script]):
    """A pipeline for script calls (``script(keys, args, client=batch)``) and ``execute()``:
    redis-py's own on one Redis, a ScriptBatch on a cluster."""
    return ScriptBatch(client, scripts) if is_cluster(client) else client.pipeline(transaction=False)


class ScriptBatch:
    """Script calls queued for a cluster client. ``Script.__call__`` sends ``evalsha`` here;
    ``execute`` runs them all and returns their replies in order (the first error raised after
    every call ran, as a pipeline does)."""

    def __init__(self, client: RedisCluster, scripts: Iterable[Script]):
        self._pipe = client.pipeline()
        self._scripts = {s.sha: s for s in scripts}
        self._calls: list[tuple[str, int, tuple]] = []

    def evalsha(self, sha: str, numkeys: int, *keys_and_args) -> ScriptBatch:
        self._calls.append((sha, numkeys, keys_and_args))
        self._pipe.execute_command("EVALSHA", sha, numkeys, *keys_and_args)
        return self

    def execute(self) -> list:
        calls, self._calls = self._calls, []
        replies = self._pipe.execute(raise_on_error=False) if calls else []
        out: list = []
        error: Exception | None = None
        for (sha, numkeys, keys_and_args), reply in zip(calls, replies):
            if isinstance(reply, NoScriptError):  # loads the script on that shard, runs it once
                reply = self._scripts[sha](keys=keys_and_args[:numkeys], args=keys_and_args[numkeys:])
            elif isinstance(reply, Exception):
                error = error or reply
            out.append(reply)
        if error is not None:
            raise error
        return out
