"""A private primary with a replica in sync (two redis-servers), and pausing a server."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

from tests.support.wait import wait_until

#: the primary starts a diskless sync at once (Redis 7 waits 5 s for more replicas by default)
PRIMARY_ARGS = ("--repl-diskless-sync-delay", "0")


def replicated_pair(make):
    """(primary, replica) from ``make`` (the ``private_redis`` fixture), the replica in sync."""
    primary, replica = make(*PRIMARY_ARGS), make()
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
