"""Durable acknowledgements: a write waits for replicas (``Config.wait_replicas``).

Redis replicates asynchronously; ``WAIT n ms`` blocks until ``n`` replicas have every write made
so far *on the connection WAIT is sent on*. A pooled client may send two calls on two connections,
so a script and its WAIT go in one pipeline (``transaction=False``: redis-py sends a pipeline's
commands on one connection, in order, without MULTI; scripts.py ``_then_wait`` sends it, as the
one place that runs Lua). A sweeper's pipeline of scripts ends with one WAIT. On a cluster the
pipeline goes to the primary that owns the script's slot (cluster.run_then_wait), a sweeper's batch
to each shard it writes to, each ended by its own WAIT. Scripts that only read never wait
(``READ_ONLY``).

WAIT is not consensus: it says replicas have the write, not that a failover will pick one of them."""

from __future__ import annotations

from collections.abc import Sequence

from .cluster import ScriptBatch
from .config import Config, ms
from .errors import RedisSetupError, ReplicationTimeout
from .lua_source import READ_ONLY  # scripts that write nothing: never followed by WAIT


class Waiter:
    """Sends WAIT after the writes of a script (or of a pipeline of scripts) when configured."""

    def __init__(self, redis, config: Config):
        self.replicas = config.wait_replicas
        self.timeout_ms = max(1, ms(config.wait_timeout))
        if self.replicas and type(redis).__module__.startswith("fakeredis"):
            # fakeredis has no WAIT (and no replicas): skipping it would pretend to a durability
            # that is not there, so the engine refuses to start instead.
            raise RedisSetupError(
                f"wait_replicas={self.replicas} needs a Redis server with replicas; fakeredis has no WAIT"
            )

    @property
    def command(self) -> tuple:
        """The WAIT command sent after a write."""
        return ("WAIT", self.replicas, self.timeout_ms)

    def waits(self, name: str) -> bool:
        """Whether script ``name`` is followed by WAIT."""
        return self.replicas > 0 and name not in READ_ONLY

    def execute(self, pipe: ScriptBatch) -> tuple[list, int | None]:
        """Execute a pipeline of scripts, ended by one WAIT when configured (on a cluster one per
        shard written to, on its connection): (raw replies, the fewest replicas that acknowledged
        them, or None)."""
        if not self.replicas:
            return pipe.execute(), None
        return pipe.execute_then_wait(self.command)

    def check(self, acked: int | None, verb: str, keys: Sequence[str], reply=None) -> None:
        """Raise ReplicationTimeout when fewer than ``wait_replicas`` replicas acknowledged
        (``acked`` None: the call did not wait)."""
        if acked is not None and acked < self.replicas:
            raise ReplicationTimeout(verb, _task_id(keys), acked, self.replicas, reply)


def _task_id(keys: Sequence[str]) -> str:
    """The task a script's keys name: its first key is the task's hash (engine/core/keys.py)."""
    head = keys[0] if keys else ""
    return head.rpartition(":task:")[2] if ":task:" in head else ""
