"""SSE broadcast: N concurrent subscribers on ONE web process, 10 events/s, every event to every
subscriber. Measures what a browser gets: latency from the event's write (the Lua call that XADDs
it; for flask-sse the PUBLISH) to its arrival at each client (p50/p99 over every client x event),
RSS per idle subscriber of the web process, and the Redis connections that process holds.

Servers (each one process, on a private redis-server):

- ``ghostless-gthread``: ``ghostless web --workers 1 --threads N+64`` (gunicorn gthread: what
  ``ghostless web`` runs); clients stream ``/api/events`` as an admin (every event).
- ``ghostless-gevent``: the same app on gunicorn's gevent worker (``--server gevent``).
- ``flask-sse``: the baseline, flask-sse's blueprint on gunicorn + gevent (one Redis pub/sub
  subscription per client). Needs ``pip install .[bench]`` (flask-sse, gevent): not in
  requirements.txt.

Clients: one asyncio process holding every connection (HTTP/1.0, raw sockets).
Usage: ``python bench/sse.py [--levels 100,500,1000] [--servers ...] [--events 100]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NS = "ssebench"
SEQ = re.compile(rb"seq=(\d+);")


# -- the apps the servers load (imported by gunicorn workers: keep this part light) ------------------
def engine():
    """``--app bench.sse:engine``: an engine with one task type whose progress reports are the events.

    Its client has a *blocking* pool of 32 connections: redis-py's default pool raises "Too many
    connections" (the web answers 503) once more than 100 requests need Redis at the same moment,
    which 1,000 browsers connecting at once do (see docs/web.md, Serving).
    """
    import redis

    from ghostless import Engine

    pool = redis.BlockingConnectionPool.from_url(
        os.environ["GHOSTLESS_REDIS_URL"], max_connections=32, timeout=30, socket_timeout=10
    )
    e = Engine(redis.Redis(connection_pool=pool), namespace=NS, dispatcher=None, check=False)

    @e.task(name="tick", queue="sse", lease=3600, timeout=7200, max_attempts=1)
    def tick(ctx):  # pragma: no cover - never run: the bench reports progress on its lease itself
        return None

    return e


def baseline_app():
    """``bench.sse:baseline_app()``: flask-sse as its README sets it up."""
    from flask import Flask
    from flask_sse import sse

    app = Flask(__name__)
    app.config["REDIS_URL"] = os.environ["GHOSTLESS_REDIS_URL"]
    app.register_blueprint(sse, url_prefix="/stream")
    return app


# -- measuring ------------------------------------------------------------------------------------------
def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def local_ports(pid: int) -> set[int]:
    """Local TCP ports of ``pid``'s sockets (from /proc: its fds' inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def redis_connections(client, pid: int) -> tuple[int, int]:
    """(connections of ``pid`` in CLIENT LIST, of which blocked in XREAD/SUBSCRIBE)."""
    ports = local_ports(pid)
    mine = [c for c in client.client_list() if int(c["addr"].rsplit(":", 1)[1]) in ports]
    return len(mine), sum(1 for c in mine if c.get("cmd") in ("xread", "subscribe"))


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else float("nan")


# -- clients ------------------------------------------------------------------------------------------
class Clients:
    """N SSE connections in one asyncio loop; records when each ``seq=N;`` arrives at each client."""

    def __init__(self, port: int, path: str, headers: dict):
        self.port, self.path = port, path
        self.request = (
            f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n"
        ).encode()
        self.arrived: list[dict[int, float]] = []
        self.tasks = []

    async def _one(self, index: int, ready) -> None:
        import asyncio
        import time

        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20)
        writer.write(self.request)
        got = self.arrived[index]
        try:
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"client {index}: {status!r}")
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            ready(index)  # headers came: subscribed (ghostless sends them at once)
            while line := await reader.readline():
                m = SEQ.search(line)
                if m:
                    got.setdefault(int(m.group(1)), time.time())
                    ready(index)
        finally:
            writer.close()

    async def connect(self, n: int, ready, batch: int = 50) -> None:
        import asyncio

        for start in range(0, n, batch):
            for i in range(start, min(n, start + batch)):
                self.arrived.append({})
                self.tasks.append(asyncio.ensure_future(self._one(i, ready)))
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        import asyncio

        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


# -- one level on one server ----------------------------------------------------------------------------
def run_level(kind: str, n: int, events: int, rate: float, server) -> dict:
    import asyncio
    import time

    from tests.support.procs import ROOT as ROOT_DIR, Proc
    from tests.support.redis_server import free_port
    from tests.support.wait import wait_until

    client = server.client(decode_responses=True)
    client.flushall()
    os.environ["GHOSTLESS_REDIS_URL"] = server.url
    producer = engine()
    token = producer.users.add("bench", admin=True)
    port = free_port()
    env = {
        **os.environ,
        "GHOSTLESS_REDIS_URL": server.url,
        "GHOSTLESS_SECRET_KEY": "bench",
        "PYTHONPATH": str(ROOT_DIR),
        "GHOSTLESS_APP": "bench.sse:engine",
        # every subscriber is one user here: lift the per-user and per-process caps on streams
        "GHOSTLESS_STREAMS_PER_USER": str(n),
        "GHOSTLESS_HELD_MAX": str(n + 8),
    }
    py = sys.executable
    if kind == "ghostless-gthread":
        args = [
            py,
            "-m",
            "ghostless",
            "web",
            "--app",
            "bench.sse:engine",
            "--port",
            str(port),
            "--workers",
            "1",
            "--server",
            "gthread",
            "--threads",
            str(n + 64),
            "--log-level",
            "WARNING",
        ]
    elif kind == "ghostless-gevent":
        args = [
            py,
            "-m",
            "ghostless",
            "web",
            "--app",
            "bench.sse:engine",
            "--port",
            str(port),
            "--workers",
            "1",
            "--server",
            "gevent",
            "--connections",
            str(n + 200),
            "--log-level",
            "WARNING",
        ]
    else:
        args = [
            py,
            "-m",
            "gunicorn",
            "-k",
            "gevent",
            "-w",
            "1",
            "--worker-connections",
            str(n + 200),
            "-b",
            f"127.0.0.1:{port}",
            "--timeout",
            "60",
            "bench.sse:baseline_app()",
        ]
    proc = Proc(args, env)
    try:
        booted = re.compile(r"Booting worker with pid: (\d+)")
        worker = int(wait_until(lambda: booted.search(proc.output()), timeout=30, what="a gunicorn worker").group(1))
        path, headers = (
            ("/stream", {}) if kind == "flask-sse" else ("/api/events", {"Authorization": f"Bearer {token}"})
        )
        lease = producer.claim(producer.submit("tick", {}, owner="bench").id, "bench")

        def emit(seq: int) -> float:
            sent = time.time()
            if kind == "flask-sse":
                client.publish("sse", json.dumps({"data": {"message": f"seq={seq};"}, "type": "progress"}))
            else:
                producer.progress(lease, (seq % 1000) / 1000, f"seq={seq};")
            return sent

        async def main() -> dict:
            import urllib.request

            def up():
                try:
                    return urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) and True
                except urllib.error.HTTPError:
                    return True
                except OSError:
                    return False

            while not up():
                await asyncio.sleep(0.1)
            # Warm up with one client (the broker thread starts), then the idle baseline.
            warm = Clients(port, path, headers)
            seen: set[int] = set()
            await warm.connect(1, seen.add)
            for seq in range(10**6, 10**6 + 50):
                if warm.arrived[0]:
                    break
                emit(seq)
                await asyncio.sleep(0.1)
            await warm.close()
            await asyncio.sleep(1.0)
            rss0 = rss_kib(worker)
            clients, ready = Clients(port, path, headers), set()
            await clients.connect(n, ready.add)
            seq = 2 * 10**6  # flask-sse sends headers with the first message: warm until all have one
            deadline = time.monotonic() + 30
            while (len(ready) < n or any(not a for a in clients.arrived)) and time.monotonic() < deadline:
                if kind == "flask-sse" or any(not a for a in clients.arrived):
                    emit(seq)
                    seq += 1
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.5)  # idle: nothing in flight
            rss_n, conns = rss_kib(worker), redis_connections(client, worker)
            sent = {}
            for i in range(events):
                sent[i] = emit(i)
                await asyncio.sleep(max(0.0, sent[i] + 1 / rate - time.time()))
            last = time.monotonic() + 10
            while sum(1 for a in clients.arrived if events - 1 in a) < n and time.monotonic() < last:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            lat = [(a[i] - sent[i]) * 1000 for a in clients.arrived for i in range(events) if i in a]
            ended = [t for t in clients.tasks if t.done()]
            if ended or len(lat) < n * events:
                errors = {repr(t.exception())[:120] for t in ended if not t.cancelled() and t.exception()}
                print(
                    f"  {kind} n={n}: {len(ended)} client streams ended early {sorted(errors)[:3]}; "
                    f"{sum(1 for a in clients.arrived if not any(i in a for i in range(events)))} got no event",
                    file=sys.stderr,
                )
                for line in sorted(
                    {
                        ln[ln.find("ghostless") :][:200]
                        for ln in proc.output().splitlines()
                        if "unavailable" in ln or "Error" in ln
                    }
                )[:3]:
                    print("   ", line, file=sys.stderr)
            await clients.close()
            return {
                "server": kind,
                "clients": n,
                "ready": len(ready),
                "delivered": len(lat),
                "expected": n * events,
                "p50_ms": percentile(lat, 50),
                "p99_ms": percentile(lat, 99),
                "max_ms": max(lat) if lat else float("nan"),
                "kib_per_idle_sub": (rss_n - rss0) / n,
                "rss0_mib": rss0 / 1024,
                "rss_mib": rss_n / 1024,
                "redis_conns": conns[0],
                "redis_blocked": conns[1],
            }

        return asyncio.run(main())
    except Exception:
        print(proc.output()[-3000:], file=sys.stderr)
        raise
    finally:
        proc.stop()
        client.close()


def main(argv=None) -> int:
    import argparse
    import resource

    from bench._common import machine, private_redis

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="100,500,1000")
    ap.add_argument("--servers", default="ghostless-gthread,ghostless-gevent,flask-sse")
    ap.add_argument("--events", type=int, default=100, help="events per level (at --rate per second)")
    ap.add_argument("--rate", type=float, default=10.0)
    opts = ap.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,000 sockets here and in the server
    print(machine())
    print(f"{opts.events} events at {opts.rate:g}/s per level, every event to every subscriber\n")
    head = (
        f"{'server':<18} {'subs':>5} {'delivered':>15} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'KiB/idle sub':>12} {'RSS MiB':>13} {'redis conns':>12}"
    )
    print(head)
    rows = []
    with private_redis() as server:
        for kind in opts.servers.split(","):
            for n in (int(x) for x in opts.levels.split(",")):
                r = run_level(kind, n, opts.events, opts.rate, server)
                rows.append(r)
                print(
                    f"{r['server']:<18} {n:>5} {r['delivered']:>7}/{r['expected']:<7} {r['p50_ms']:>8.1f} "
                    f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {r['kib_per_idle_sub']:>12.1f} "
                    f"{r['rss0_mib']:>5.1f}->{r['rss_mib']:<6.1f} {r['redis_conns']:>5} "
                    f"({r['redis_blocked']} blocked)",
                    flush=True,
                )
    print(
        "\ntargets at 1,000 subscribers: p99 <= 100 ms, <= 32 KiB per idle subscriber, one Redis "
        "connection reading events per web process"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
