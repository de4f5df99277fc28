"""Private Redis Cluster (3 masters + 3 replicas) and Sentinel set-ups for tests and chaos runs.

Every process is a redis-server we start on a free loopback port, in its own temp dir, and stop
by pid. Never touches the machine's shared Redis on 6379.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import redis
from redis.cluster import ClusterNode, RedisCluster

from tests.support.redis_server import RedisServer, free_port, redis_server_path
from tests.support.tether import tether


def redis_cli_path() -> str | None:
    return shutil.which("redis-cli")


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class ClusterNodeServer(RedisServer):
    """One cluster node: a RedisServer with cluster mode and its own nodes.conf."""

    def __init__(self, node_timeout_ms: int):
        super().__init__(
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            # a replica with stale data may still be promoted (tests want a fast failover)
            "--cluster-replica-validity-factor",
            "0",
            "--cluster-require-full-coverage",
            "yes",
        )
        self.port = free_port()  # its bus port (port + 10000) is free too

    def info(self) -> dict:
        reply = self.client(socket_timeout=1, decode_responses=True).execute_command("CLUSTER INFO")
        if isinstance(reply, dict):  # redis-py parses the reply
            return {str(k): str(v) for k, v in reply.items()}
        return dict(line.split(":", 1) for line in str(reply).strip().splitlines() if ":" in line)

    def role(self) -> str:
        return self.client(socket_timeout=1).execute_command("ROLE")[0].decode()


class Cluster:
    """A real Redis Cluster on loopback: ``masters`` masters with ``replicas`` replicas each.

    ``kill(node)`` SIGKILLs a node, ``restart(node)`` starts it again on the same port and
    nodes.conf (it rejoins, as a replica when it lost its slots), ``wait_failover(node)`` waits
    until another node serves the killed master's slots and the cluster is ok again.
    """

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000):
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[ClusterNodeServer] = []
        self._killed_slots: dict[int, list[tuple[int, int]]] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> Cluster:
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                self.nodes.append(ClusterNodeServer(self.node_timeout_ms).start())
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            subprocess.run(
                [redis_cli_path(), "--cluster", "create", *addrs, "--cluster-replicas", str(self.replicas)]
                + ["--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
            self.wait_ok(timeout)
            self.wait_replicas_synced(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []

    # -- clients -------------------------------------------------------------------------------
    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for n in self.nodes if n.proc and n.proc.poll() is None]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    def client(self, **kw) -> RedisCluster:
        nodes = [ClusterNode(h, p) for h, p in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **kw)

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for node in self.master_nodes():
            node.client(socket_timeout=5).flushall()
        self.wait_replicas_synced(30)

    # -- topology ------------------------------------------------------------------------------
    def alive(self) -> list[ClusterNodeServer]:
        return [n for n in self.nodes if n.proc and n.proc.poll() is None]

    def master_nodes(self) -> list[ClusterNodeServer]:
        return [n for n in self.alive() if n.role() == "master"]

    def replica_nodes(self) -> list[ClusterNodeServer]:
        return [n for n in self.alive() if n.role() == "slave"]

    def node_for_key(self, key: str | bytes) -> ClusterNodeServer:
        """The live master that serves ``key``'s slot now."""
        slot = self.alive()[0].client(socket_timeout=1).execute_command("CLUSTER KEYSLOT", key)
        for node in self.master_nodes():
            for entry in node.client(socket_timeout=1).execute_command("CLUSTER SLOTS"):
                start, end, master = entry[0], entry[1], entry[2]
                if start <= slot <= end and int(master[1]) == node.port:
                    return node
        raise RuntimeError(f"no live master serves slot {slot}")

    def replica_of(self, master: ClusterNodeServer) -> ClusterNodeServer:
        """A live replica of ``master`` (linked to it)."""
        for node in self.replica_nodes():
            info = node.client(socket_timeout=1).info("replication")
            if int(info.get("master_port", 0)) == master.port and info.get("master_link_status") == "up":
                return node
        raise RuntimeError(f"no live replica linked to {master.port}")

    def _covered(self) -> bool:
        """Every one of the 16384 slots is served by a live master, as every live node sees it."""
        alive_ports = {n.port for n in self.alive()}
        for node in self.alive():
            if node.info().get("cluster_state") != "ok":
                return False
            served = 0
            for entry in node.client(socket_timeout=1).execute_command("CLUSTER SLOTS"):
                if int(entry[2][1]) not in alive_ports:
                    return False
                served += entry[1] - entry[0] + 1
            if served != 16384:
                return False
        return True

    def wait_ok(self, timeout: float = 30.0) -> None:
        _wait(self._covered, timeout, "cluster_state:ok with every slot served on every node")

    def wait_replicas_synced(self, timeout: float = 30.0) -> None:
        """Until every replica is linked to its master and has every write its master had when
        this was called (replication is asynchronous: a write acknowledged just now may not be
        on the replica yet)."""
        offsets = {
            m.port: m.client(socket_timeout=1).info("replication")["master_repl_offset"] for m in self.master_nodes()
        }

        def synced() -> bool:
            for node in self.replica_nodes():
                info = node.client(socket_timeout=1).info("replication")
                if info.get("master_link_status") != "up":
                    return False
                if info.get("slave_repl_offset", -1) < offsets.get(info.get("master_port"), 0):
                    return False
                if node.client(socket_timeout=1).info("persistence").get("loading"):
                    return False
            return len(self.replica_nodes()) == self.masters * self.replicas

        _wait(synced, timeout, "every replica linked to its master")

    # -- chaos ---------------------------------------------------------------------------------
    def slots_of(self, node: ClusterNodeServer) -> list[tuple[int, int]]:
        """The slot ranges ``node`` serves as a master now."""
        entries = node.client(socket_timeout=1).execute_command("CLUSTER SLOTS")
        return [(e[0], e[1]) for e in entries if int(e[2][1]) == node.port]

    def kill(self, node: ClusterNodeServer) -> None:
        """SIGKILL one node (by pid); its slots are remembered for ``wait_failover``."""
        if node.proc and node.proc.poll() is None and node.role() == "master":
            self._killed_slots[node.port] = self.slots_of(node)
        node.kill()

    def restart(self, node: ClusterNodeServer, timeout: float = 30.0) -> None:
        """Start a killed node again (same port, same nodes.conf) and wait until the cluster is ok."""
        node.kill()
        node.start()
        self.wait_ok(timeout)

    def promote(self, replica: ClusterNodeServer, timeout: float = 30.0) -> None:
        """A manual failover (``CLUSTER FAILOVER`` on ``replica``): it takes its master's slots,
        the master becomes its replica (and answers MOVED); returns once it is linked again."""
        replica.client(socket_timeout=5).execute_command("CLUSTER FAILOVER")
        _wait(lambda: replica.role() == "master", timeout, f"{replica.port} promoted")
        self.wait_ok(timeout)
        self.wait_replicas_synced(timeout)

    def wait_failover(self, killed: ClusterNodeServer, timeout: float = 30.0) -> ClusterNodeServer:
        """After ``kill(killed)`` of a master: wait until a replica took its slots; return it."""
        self.wait_ok(timeout)
        slots = self._killed_slots.get(killed.port)
        if not slots:
            raise RuntimeError(f"node {killed.port} was not a master killed with kill()")
        for node in self.master_nodes():
            if slots[0] in self.slots_of(node):
                return node
        raise RuntimeError(f"no live master took the slots of {killed.port}")


class Sentinels:
    """One primary, one replica and three sentinels watching them as service ``name``."""

    def __init__(self, name: str = "ghostless", down_after_ms: int = 1000, failover_timeout_ms: int = 3000):
        self.name = name
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.primary: RedisServer | None = None
        self.replica: RedisServer | None = None
        self.sentinels: list[subprocess.Popen] = []
        self.sentinel_ports: list[int] = []
        self.dir = tempfile.mkdtemp(prefix="ghostless-sentinel-")

    def start(self, timeout: float = 30.0) -> Sentinels:
        try:
            self.primary = RedisServer().start()
            self.replica = RedisServer("--replicaof", "127.0.0.1", str(self.primary.port)).start()
            _wait(
                lambda: self.replica.client(socket_timeout=1).info("replication").get("master_link_status") == "up",
                timeout,
                "the replica linked to the primary",
            )
            for i in range(3):
                port = free_port()
                conf = os.path.join(self.dir, f"sentinel-{i}.conf")
                with open(conf, "w") as f:
                    f.write(
                        f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor {self.name} 127.0.0.1 {self.primary.port} 2\n"
                        f"sentinel down-after-milliseconds {self.name} {self.down_after_ms}\n"
                        f"sentinel failover-timeout {self.name} {self.failover_timeout_ms}\n"
                        f"sentinel parallel-syncs {self.name} 1\n"
                    )
                log = os.path.join(self.dir, f"sentinel-{i}.log")
                self.sentinels.append(
                    subprocess.Popen(
                        [redis_server_path(), conf, "--sentinel", "--logfile", log],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        preexec_fn=tether(),
                    )
                )
                self.sentinel_ports.append(port)
            _wait(self._all_see_replica, timeout, "every sentinel to know the primary and its replica")
        except BaseException:
            self.close()
            raise
        return self

    def _sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, decode_responses=True)

    def _all_see_replica(self) -> bool:
        for port in self.sentinel_ports:
            s = self._sentinel(port)
            if not s.sentinel_slaves(self.name):
                return False
            if len(s.sentinel_sentinels(self.name)) < 2:
                return False
        return True

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.sentinel_ports]

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"{h}:{p}" for h, p in self.addresses) + f"/{self.name}"

    def master_address(self) -> tuple[str, int]:
        host, port = self._sentinel(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(self.name)
        return host, int(port)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary (by pid); return the server killed."""
        _, port = self.master_address()
        victim = self.primary if self.primary and self.primary.port == port else self.replica
        assert victim is not None
        victim.kill()
        return victim

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> tuple[str, int]:
        """Wait until every sentinel names a new primary that answers as a master; return its address."""

        def promoted():
            addrs = {tuple(self._sentinel(p).sentinel_get_master_addr_by_name(self.name)) for p in self.sentinel_ports}
            if len(addrs) != 1:
                return None
            host, port = next(iter(addrs))
            if int(port) == old_port:
                return None
            role = redis.Redis(host=host, port=int(port), socket_timeout=1).execute_command("ROLE")[0]
            return (host, int(port)) if role in (b"master", "master") else None

        return _wait(promoted, timeout, f"sentinels to promote a new primary for {self.name}")

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of each sentinel's log (its +tilt, +sdown, +convert-to-slave...): what a
        timed-out wait on the sentinels reports, as their temp dir goes with close()."""
        tails = []
        for i, port in enumerate(self.sentinel_ports):
            try:
                with open(os.path.join(self.dir, f"sentinel-{i}.log"), errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
            except OSError as e:
                tail = [f"(no log: {e})"]
            tails.append(f"sentinel {port}:\n" + "\n".join(tail))
        return "\n".join(tails)

    def close(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.sentinels = []
        for server in (self.primary, self.replica):
            if server:
                server.close()
        shutil.rmtree(self.dir, ignore_errors=True)
