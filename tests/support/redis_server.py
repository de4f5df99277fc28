"""Private redis-server processes for tests and benchmarks: own port, own temp dir.

Never touches the machine's shared Redis on 6379.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

import redis

from tests.support.tether import tether

#: Ports a test process picks for the servers it starts: a range of its own per pytest-xdist worker
#: (gw0, gw1, ...; a run without xdist is gw0), below the kernel's ephemeral ports, each with its
#: cluster bus range (port + 10000) clear of every process's. A port a test freed (a server it killed
#: to make an outage) is then never taken by another worker's server meanwhile.
PORTS_FROM, PORTS_PER_WORKER, MAX_WORKERS = 12000, 1000, 8


def worker_ports() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    start = PORTS_FROM + (n % MAX_WORKERS) * PORTS_PER_WORKER
    return range(start, start + PORTS_PER_WORKER)


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: Where free_port looks next: it goes round its range from a random place, so a port it gave is
#: not given again before every other one was, however soon. (A random pick could give a port twice
#: before its first server had bound it: three sentinels started one after another.)
_next_port = itertools.count(random.randrange(PORTS_PER_WORKER))


def free_port() -> int:
    """A free loopback port of this process's range whose port + 10000 is free too (a cluster node's bus)."""
    ports = worker_ports()
    for _ in range(len(ports)):
        port = ports[next(_next_port) % len(ports)]
        if bindable(port) and bindable(port + 10000):
            return port
    raise RuntimeError(f"no free port in {ports} (with its port + 10000)")


#: The server binary every private server of the tests and benches runs, when set (a path): another
#: Redis, or Valkey, whose behaviour the suite then checks (``make check-valkey``). Unset:
#: ``redis-server`` on the PATH.
SERVER_ENV = "GHOSTLESS_TEST_REDIS_SERVER"


def redis_server_path() -> str | None:
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise RuntimeError(f"{SERVER_ENV}={chosen!r} is not an executable file")
        return os.path.abspath(chosen)  # a path relative to where the run began: any cwd may start it
    return shutil.which("redis-server")


class RedisServer:
    """A redis-server we own: start, stop, SIGKILL, restart (same port and data dir)."""

    def __init__(self, *extra: str, appendonly: bool = False, appendfsync: str = "everysec"):
        self.dir = tempfile.mkdtemp(prefix="ghostless-redis-")
        self.port = free_port()
        self.extra = list(extra)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            redis_server_path(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--maxmemory-policy",
            "noeviction",
            # a replica's full sync starts at once (Redis 7 waits 5 s for more replicas by default):
            # every replica, Sentinel and cluster set-up, and each resync after a failover
            "--repl-diskless-sync-delay",
            "0",
            "--logfile",
            os.path.join(self.dir, "redis.log"),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=tether())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.log_tail()}")
            try:
                with self.client(socket_timeout=0.5) as client:
                    pid = client.info("server")["process_id"]
                if pid == self.proc.pid:
                    return self
                # another process's server took the port between its pick and this one's bind
                raise RuntimeError(f"port {self.port} answers for pid {pid}, not for this redis-server")
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout}s")

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: what a crash does (AOF decides what survives)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, kill: bool = True) -> None:
        self.kill() if kill else self.stop()
        self.start()

    def close(self) -> None:
        # Killed: its files go with it, and a primary stopped politely first waits for its replicas
        # to catch up (shutdown-timeout), about a second per test that had one.
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class FullRedis:
    """The Redis of ``client`` full while inside: maxmemory 1 byte under noeviction, so every write
    command is refused (as are functions that may write). Reusable."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        self.client.config_set("maxmemory", 1)

    def __exit__(self, *exc):
        self.client.config_set("maxmemory", 0)
