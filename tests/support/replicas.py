"""A private primary with a replica in sync (two redis-servers), and pausing a server."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

from tests.support.wait import wait_until


def replicated_pair(make):
    """(primary, replica) from ``make`` (the ``private_redis`` fixture), the replica in sync."""
    primary, replica = make(), make()
    attach(replica, primary)
    return primary, replica


def attach(replica, primary, port: int | None = None) -> None:
    """Make ``replica`` replicate ``primary`` (through ``port``: a proxy in front of it); return
    once the primary counts it for WAIT (the replica's own ``master_link_status:up`` comes before
    the primary puts it online)."""
    rr, rp = replica.client(), primary.client()
    rr.replicaof("127.0.0.1", port or primary.port)
    wait_until(lambda: rr.info("replication")["master_link_status"] == "up", what="replica in sync")
    wait_until(lambda: rp.wait(1, 100) >= 1, what="the primary counting its replica")


@contextmanager
def stopped(server):
    """The server's process paused (SIGSTOP): still connected, acknowledging nothing."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def wait_calls(client) -> int:
    """WAIT commands a server has run."""
    return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


class Standalone:
    """A primary and its replica, as the durable tests see a set-up (tests/engine/test_durable.py)."""

    def __init__(self, primary, replica):
        self.primary, self.replica = primary, replica

    @classmethod
    def make(cls, make) -> Standalone:
        return cls(*replicated_pair(make))

    def client(self):
        """A client for the engine."""
        return self.primary.client()

    def primary_for(self, key: str):
        """The server that takes writes to ``key``."""
        return self.primary

    def replica_for(self, key: str):
        """The server that replicates writes to ``key``."""
        return self.replica

    def replica_reader(self, key: str):
        """A client that reads ``key`` on its replica."""
        return self.replica.client()

    def waits(self) -> int:
        """WAIT commands run, over every primary."""
        return wait_calls(self.primary.client())


class OnCluster(Standalone):
    """A Redis Cluster (tests/support/cluster.py), emptied, every replica in sync: each key's
    primary and replica are those of its shard."""

    def __init__(self, cluster):
        self.cluster = cluster

    @classmethod
    def make(cls, cluster) -> OnCluster:  # type: ignore[override]
        cluster.flushall()
        return cls(cluster)

    def client(self):
        return self.cluster.client()

    def primary_for(self, key: str):
        return self.cluster.node_for_key(key)

    def replica_for(self, key: str):
        return self.cluster.replica_of(self.cluster.node_for_key(key))

    def replica_reader(self, key: str):
        """One connection to the replica in READONLY mode (a replica answers MOVED without it)."""
        client = self.replica_for(key).client(single_connection_client=True)
        client.execute_command("READONLY")
        return client

    def waits(self) -> int:
        return sum(wait_calls(node.client()) for node in self.cluster.master_nodes())
