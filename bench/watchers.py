"""Watchers: N task pages, each watching its own task, opened ALL AT ONCE on one ``ghostless web``;
then progress events spread over those tasks, each carrying its send time. What a user gets.

Per size N, on a private redis-server (AOF, fsync every second: what ghostless recommends):

1. N users, each with a bearer token (``engine.users.add``) and one task of their own, claimed
   by the bench (PROCESSING, a 1 h lease; no RQ). One user per page is the real shape: the
   per-user stream cap (GHOSTLESS_STREAMS_PER_USER) is left at its default.
2. The web started by the DEFAULT command line, ``python -m ghostless web --app
   bench.watchers:engine --port P`` (env: GHOSTLESS_REDIS_URL, GHOSTLESS_SECRET_KEY, nothing
   else), plus a variant's extra flags (``--variant 'gevent=--server gevent'``). The app is what
   a user writes: ``Engine.from_url()`` and a task type. A few warm-up streams, then its RSS.
3. The load generator (bench/watchers_load.py, one process per 5,000 streams) opens every
   page's ``/api/tasks/<id>/events`` at the same instant and records per connection: errors by
   kind, time to first event (the snapshot). Redis connections are sampled meanwhile (peak).
4. Idle: RSS of the web's worker processes (sum), minus before, per open stream; Redis
   connections of each worker (its sockets, /proc, matched in CLIENT LIST).
5. ``--rate`` progress events/s for ``--duration`` s, round robin over the N tasks (engine
   progress calls on the held leases, pipelined per 10 ms tick), each with ``t=<time.time()>``
   in its message; delivery latency at the receivers p50/p99/max. Events not in by ``GRACE`` s
   after the last send count as missing.

With ``--resume`` the pages reconnect as browsers do after a web restart: before they open, the
bench notes the queue stream's newest id and sends one progress event per task; every page then
opens with that ``Last-Event-ID`` and counts as open when the event it missed arrives (or a
snapshot). The bench's own engine keeps 4 x N events per queue stream for that run, so the missed
events are replayed rather than answered by a snapshot for a trimmed stream.

Each size is bounded in time: at most ``--open-timeout`` + ``--duration`` + about 40 s.

Usage: ``python bench/watchers.py [--n 1000,2000,5000,10000] [--variant label=FLAGS ...]
[--duration 30] [--rate 1000] [--open-timeout 30] [--resume] [--quick]``. Targets (issue 12, checked at
every size; a miss exits 1, a size that could not be measured 2): all opened within 10 s, 0 errors, delivery p99 <=
100 ms,
<= 32 KiB per idle watcher, <= 10 Redis connections per web process.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NS = "watchers"
TYPE = "watched"
BENCH_CLIENT = "watchers-bench"  # CLIENT SETNAME of the bench's own connections (not the web's)
WARM = 4  # warm-up streams (extra users and tasks) before the idle RSS
PER_GENERATOR = 5000  # streams per load-generator process (one core at most each)
GRACE = 3.0  # s after the last send for deliveries to come in
SETTLE = 1.5  # s of quiet before an RSS reading
TARGETS = {"open_s": 10.0, "p99_ms": 100.0, "kib": 32.0, "conns": 10}


def engine():
    """``--app bench.watchers:engine``: the app as a user writes it (imported by the web's workers)."""
    from ghostless import Engine

    return register(Engine.from_url(namespace=NS))


def register(e):
    @e.task(name=TYPE, queue="watch", lease=3600, timeout=7200, max_attempts=1)
    def watched(ctx):  # pragma: no cover - never run: the bench reports progress on its lease itself
        return None

    return e


# -- set-up -------------------------------------------------------------------------------------------
def make_watchers(producer, total: int) -> list[tuple[str, str, object]]:
    """``total`` (user's token, task id, lease): one user per task, the task claimed by the bench."""
    from bench._common import chunks, pipelined_claims

    names = [f"w{i}" for i in range(total)]
    tokens = [producer.users.add(name) for name in names]
    leases = []
    for batch in chunks(names, 500):
        leases += pipelined_claims(producer, TYPE, {}, batch, worker="bench")
    return [(token, lease.task_id, lease) for token, lease in zip(tokens, leases)]


# -- the web process ----------------------------------------------------------------------------------
class Web:
    """``python -m ghostless web --app bench.watchers:engine --port P [flags]`` on the private Redis."""

    def __init__(self, redis_url: str, flags: list[str]):
        from tests.support.procs import Proc
        from tests.support.redis_server import free_port

        self.port = free_port()
        self.workers_expected = int(flags[flags.index("--workers") + 1]) if "--workers" in flags else 2
        env = {
            **os.environ,
            "GHOSTLESS_REDIS_URL": redis_url,
            "GHOSTLESS_SECRET_KEY": "watchers-bench",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        self.args = [
            sys.executable,
            "-m",
            "ghostless",
            "web",
            "--app",
            "bench.watchers:engine",
            "--port",
            str(self.port),
            *flags,
        ]
        self.proc = Proc(self.args, env)

    def wait_up(self, timeout: float = 30.0) -> None:
        from tests.support.wait import wait_until

        wait_until(lambda: self._healthy() or not self.proc.alive(), timeout, 0.05, "the web's /healthz")
        if not self.proc.alive():
            raise RuntimeError(f"the web exited: {self.proc.output()[-2000:]}")

        def booted() -> int:
            return len(re.findall(r"Booting worker with pid", self.proc.output()))

        if booted():  # gunicorn: every worker up (the dev server has none)
            wait_until(lambda: booted() >= self.workers_expected, timeout, 0.05, "every gunicorn worker")

    def _healthy(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
                return b" 200 " in s.recv(64)
        except OSError:
            return False

    def pids(self) -> list[int]:
        """The worker processes (gunicorn's children), else the one serving process."""
        return self.proc.children() or [self.proc.pid]

    def rss_kib(self) -> int:
        from bench.sse import rss_kib

        return sum(rss_kib(pid) for pid in self.pids())

    def redis_conns(self, client) -> list[int]:
        """Redis connections of each worker: its TCP sockets' local ports, found in CLIENT LIST."""
        from bench.sse import local_ports

        clients = {int(c["addr"].rsplit(":", 1)[1]) for c in client.client_list()}
        return [len(local_ports(pid) & clients) for pid in self.pids()]

    def complaints(self, top: int = 3) -> list[tuple[int, str]]:
        """The most frequent warnings and errors in the web's log (count, message without its time and pid)."""
        counts: dict[str, int] = {}
        for line in self.proc.output().splitlines():
            if any(word in line for word in ("WARNING", "ERROR", "CRITICAL", "Error", "ended early", "Booting worker")):
                message = re.sub(r"^.*?(WARNING|ERROR|CRITICAL|\[ERROR\]|\[CRITICAL\]|\[INFO\])\s*", "", line)[:140]
                counts[message] = counts.get(message, 0) + 1
        return sorted(((k, m) for m, k in counts.items()), reverse=True)[:top]

    def fd_limit(self) -> int:
        for line in Path(f"/proc/{self.pids()[0]}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
        return 0

    def stop(self) -> None:
        self.proc.stop()
        self.proc.log.close()
        os.unlink(self.proc.log.name)


def warm_up(port: int, watchers) -> None:
    """Open each warm-up page's stream at once, read to its snapshot, close (threads start, code loads)."""

    def one(token: str, task_id: str) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(
                f"GET /api/tasks/{task_id}/events HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
            )
            got = b""
            while b"event: snapshot" not in got and (chunk := s.recv(65536)):
                got += chunk

    threads = [threading.Thread(target=one, args=(token, task_id)) for token, task_id, _ in watchers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)


def web_client_count(client) -> int:
    return sum(1 for c in client.client_list() if c.get("name") != BENCH_CLIENT)


# -- load generators ----------------------------------------------------------------------------------
class Generators:
    """The load-generator processes, each given its share of the pages, all starting at one instant."""

    def __init__(self, port: int, watchers, open_timeout: float, hard_stop_in: float, count: int, last_event_id=None):
        from tests.support.tether import tether

        self.start_at = time.time() + 1.5  # every process is up and has read its config by then
        self.procs, self.lines = [], queue.Queue()
        for g in range(count):
            targets = [[i, task_id, token] for i, (token, task_id, _) in enumerate(watchers) if i % count == g]
            config = {
                "port": port,
                "targets": targets,
                "start_at": self.start_at,
                "open_timeout": open_timeout,
                "hard_stop": self.start_at + hard_stop_in,
                "last_event_id": last_event_id,
            }
            p = subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "watchers_load.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                start_new_session=True,
                preexec_fn=tether(),
            )
            p.stdin.write(json.dumps(config) + "\n")
            p.stdin.flush()
            threading.Thread(target=self._read, args=(p,), daemon=True).start()
            self.procs.append(p)

    def _read(self, p) -> None:
        for line in p.stdout:
            self.lines.put(json.loads(line))
        self.lines.put({"phase": "exited", "rc": p.wait()})

    def collect(self, phase: str, timeout: float, meanwhile=None) -> list[dict]:
        """One ``phase`` record from every generator; ``meanwhile()`` is called while waiting."""
        got, deadline = [], time.monotonic() + timeout
        while len(got) < len(self.procs):
            try:
                record = self.lines.get(timeout=0.25)
            except queue.Empty:
                record = None
            if meanwhile:
                meanwhile()
            if record is not None and record["phase"] == "exited":
                raise RuntimeError(f"a load generator exited ({record['rc']}) before '{phase}'")
            if record is not None:
                got.append(record)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the load generators did not report '{phase}' within {timeout:.0f} s")
        return got

    def stop(self) -> None:
        for p in self.procs:
            try:
                p.stdin.write("stop\n")
                p.stdin.flush()
            except OSError:
                pass

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited and reaped by its reader meanwhile
                    os.killpg(p.pid, 9)
            p.wait(10)


# -- the sender -----------------------------------------------------------------------------------------
def send_progress(producer, leases: list, rate: float, duration: float) -> tuple[list[int], float]:
    """``rate`` progress events/s over ``leases`` (round robin) for ``duration`` s, one pipeline
    per 10 ms tick; each message carries its send time. Returns (events sent per lease, seconds taken)."""
    from bench._common import captured_call

    sent = [0] * len(leases)
    done, start = 0, time.time()
    while (now := time.time()) < start + duration:
        due = min(int((now - start) * rate), int(duration * rate)) - done
        if due > 0:
            pipe = producer.scripts.pipeline()
            for k in range(done, done + due):
                i = k % len(leases)
                message = f"t={time.time():.6f} k={k}"
                producer.scripts._call(
                    *captured_call(producer, producer.progress, leases[i], (k % 100) / 100, message), client=pipe
                )
                sent[i] += 1
            pipe.execute()
            done += due
        time.sleep(max(0.0, 0.01 - (time.time() - now)))
    return sent, time.time() - start


def missed_one_each(producer, client, leases: list) -> str:
    """``--resume``: the queue stream's newest id now, then one progress event for each of ``leases``
    (pipelined): the pages, resuming from that id as browsers do after a web restart, each missed one."""
    from bench._common import captured_call, chunks

    last = client.xrevrange(producer.keys.queue_key("watch", "events"), count=1)
    for batch in chunks(leases, 500):
        pipe = producer.scripts.pipeline()
        for lease in batch:
            message = f"t={time.time():.6f} missed"
            producer.scripts._call(*captured_call(producer, producer.progress, lease, 0.5, message), client=pipe)
        pipe.execute()
    return last[0][0] if last else "0-0"


# -- one size -------------------------------------------------------------------------------------------
def run_size(label: str, flags: list[str], n: int, watchers, server, client, producer, opts) -> dict:
    from bench.sse import percentile

    web = Web(server.url, flags)
    gens = None
    try:
        web.wait_up()
        warm_up(web.port, watchers[n : n + WARM])
        time.sleep(SETTLE)
        rss0 = web.rss_kib()
        count = opts.generators or -(-n // PER_GENERATOR)
        last_event_id = missed_one_each(producer, client, [w[2] for w in watchers[:n]]) if opts.resume else None
        gens = Generators(
            web.port, watchers[:n], opts.open_timeout, opts.open_timeout + opts.duration + 60, count, last_event_id
        )
        peak = [0]
        overflows0 = listen_overflows()
        opened = gens.collect(
            "opened", opts.open_timeout + 20, lambda: peak.__setitem__(0, max(peak[0], web_client_count(client)))
        )
        live = sorted(i for r in opened for i in r["live"])
        ttfe = [ms for r in opened for ms in r["ttfe"]]
        snapshots = sum(r["snapshots"] for r in opened)
        overflows = listen_overflows() - overflows0
        errors: dict[str, int] = {}
        for r in opened:
            for kind, k in r["errors"].items():
                errors[kind] = errors.get(kind, 0) + k
        time.sleep(SETTLE)
        rss1, conns = web.rss_kib(), web.redis_conns(client)
        sent, took = send_progress(producer, [w[2] for w in watchers[:n]], opts.rate, opts.duration)
        time.sleep(GRACE)
        gens.stop()
        done = gens.collect("done", 30)
        latency = [ms for r in done for ms in r["latency"]]
        expected = sum(sent[i] for i in live)
        return {
            "label": label,
            "n": n,
            "opened": len(live),
            "errors": errors,
            "dropped": sum(r["dropped"] for r in done),
            "ttfe_p50": percentile(ttfe, 50),
            "ttfe_p99": percentile(ttfe, 99),
            "ttfe_max": max(ttfe, default=float("nan")),
            "delivered": len(latency),
            "expected": expected,
            "p50": percentile(latency, 50),
            "p99": percentile(latency, 99),
            "max": max(latency, default=float("nan")),
            "kib": (rss1 - rss0) / len(live) if live else float("nan"),
            "rss0": rss0,
            "rss1": rss1,
            "conns": conns,
            "peak_conns": max(peak[0], sum(conns)),
            "rate": sum(sent) / took,
            "gen_cpu_open": max(r["cpu"] / max(r["wall"], 1e-9) for r in opened),
            "gen_cpu_live": max(r["cpu"] / max(r["wall"], 1e-9) for r in done),
            "gens": count,
            "gen_fds": opened[0]["fd_limit"],
            "web_fds": web.fd_limit(),
            "workers": len(web.pids()),
            "web_log": web.complaints(),
            "overflows": overflows,
            "snapshots": snapshots if opts.resume else None,
        }
    except Exception:
        print(f"  {label} n={n}: web log tail:\n{web.proc.output()[-2000:]}", file=sys.stderr)
        raise
    finally:
        try:
            if gens is not None:
                gens.close()
        finally:
            web.stop()  # even when closing the generators failed: a web server is never left behind


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (TcpExt
    ListenOverflows, this network namespace's): each one is a browser waiting for its SYN retry
    (1, 3, 7, 15 s). -1 where /proc does not say."""
    try:
        with open("/proc/net/netstat") as f:
            lines = [line.split() for line in f if line.startswith("TcpExt:")]
        return int(dict(zip(lines[0], lines[1]))["ListenOverflows"])
    except (OSError, KeyError, IndexError, ValueError):
        return -1


# -- report -------------------------------------------------------------------------------------------
HEAD = (
    f"{'variant':<10} {'N':>6} {'opened':>6} {'errors':>6} {'first event p50/p99/max s':>26} "
    f"{'delivered':>13} {'p50/p99/max ms':>20} {'KiB/watcher':>11} {'redis conns':>18}"
)


def row(r: dict) -> str:
    return (
        f"{r['label']:<10} {r['n']:>6} {r['opened']:>6} {sum(r['errors'].values()):>6} "
        f"{r['ttfe_p50'] / 1000:>8.2f}/{r['ttfe_p99'] / 1000:.2f}/{r['ttfe_max'] / 1000:<8.2f} "
        f"{r['delivered']:>6}/{r['expected']:<6} {r['p50']:>6.1f}/{r['p99']:.1f}/{r['max']:<7.1f} "
        f"{r['kib']:>11.1f} {'+'.join(map(str, r['conns'])):>8} (peak {r['peak_conns']})"
    )


def notes(r: dict, opts) -> list[str]:
    out = [
        (
            f"  errors by kind: {json.dumps(r['errors'], sort_keys=True) if r['errors'] else 'none'}; "
            f"{r['dropped']} streams ended during delivery; RSS {r['rss0'] / 1024:.0f} -> {r['rss1'] / 1024:.0f} MiB "
            f"over {r['workers']} worker(s); events sent {r['rate']:.0f}/s; connections dropped by a full "
            f"listen queue while opening (TcpExt ListenOverflows): {r['overflows']}"
        )
    ]
    out.append(
        f"  load generator: {r['gens']} process(es), each at most {r['gen_cpu_open']:.0%} of a core while "
        f"opening, {r['gen_cpu_live']:.0%} while receiving; {r['gen_fds']} fds each, the web {r['web_fds']}"
    )
    if r["snapshots"] is not None:
        out.append(
            f"  resuming from Last-Event-ID, one missed event each: {r['opened'] - r['snapshots']} replayed it, "
            f"{r['snapshots']} got a snapshot instead"
        )
    out += [f"  web log: {k} x {message}" for k, message in r["web_log"]]
    limits = []
    if max(r["gen_cpu_open"], r["gen_cpu_live"]) > 0.9:
        limits.append(
            f"load generator CPU-bound ({r['gens']} process(es), up to {max(r['gen_cpu_open'], r['gen_cpu_live']):.0%}"
            " of a core): its figures are a floor"
        )
    if r["rate"] < 0.95 * opts.rate:
        limits.append(f"the sender reached {r['rate']:.0f} of {opts.rate:g} events/s")
    if -(-r["n"] // r["gens"]) + 64 > r["gen_fds"] or r["n"] + 64 > r["web_fds"]:
        limits.append(f"file descriptors: {r['gen_fds']} per generator, {r['web_fds']} per web process")
    if limits:
        out.append("  where this machine stops: " + "; ".join(limits))
    return out


def verdicts(r: dict) -> tuple[bool, str]:
    checks = {
        f"opened {r['opened']}/{r['n']} within {TARGETS['open_s']:g} s": r["opened"] == r["n"]
        and r["ttfe_max"] <= TARGETS["open_s"] * 1000,
        "0 errors": not r["errors"] and not r["dropped"],
        f"delivery p99 <= {TARGETS['p99_ms']:g} ms, all delivered": r["p99"] <= TARGETS["p99_ms"]
        and r["delivered"] >= r["expected"],
        f"<= {TARGETS['kib']:g} KiB per idle watcher": r["kib"] <= TARGETS["kib"],
        f"<= {TARGETS['conns']} Redis connections per web process": max(r["conns"]) <= TARGETS["conns"]
        and r["peak_conns"] <= TARGETS["conns"] * r["workers"],
    }
    ok = all(checks.values())
    return ok, "  targets: " + "; ".join(f"{name} {'PASS' if v else 'FAIL'}" for name, v in checks.items())


def main(argv=None) -> int:
    import argparse
    import resource

    import redis

    from bench._common import AOF_EVERYSEC, Engine, machine, private_redis
    from ghostless.core.config import Config

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1000,2000,5000,10000", help="sizes: task pages opened at once")
    ap.add_argument(
        "--variant",
        action="append",
        metavar="LABEL=FLAGS",
        help="extra `ghostless web` flags under a label, e.g. 'gevent=--server gevent' (repeatable; "
        "default: 'default=', the default command line)",
    )
    ap.add_argument("--duration", type=float, default=30.0, help="s of progress events per size")
    ap.add_argument("--rate", type=float, default=1000.0, help="progress events/s, spread over the tasks")
    ap.add_argument("--open-timeout", type=float, default=30.0, help="s a page may take to get its snapshot")
    ap.add_argument("--generators", type=int, default=0, help=f"load-generator processes (0: one per {PER_GENERATOR})")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20 pages, 2 s at 100 events/s, no verdict")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="every page reconnects with Last-Event-ID, as after a web restart, and missed one event of its task",
    )
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.n, opts.duration, opts.rate, opts.open_timeout = "20", 2.0, 100.0, 15.0
    sizes = [int(x) for x in opts.n.split(",")]
    variants = [(v.partition("=")[0], shlex.split(v.partition("=")[2])) for v in (opts.variant or ["default="])]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the web and the generators inherit it
    print(machine())
    print(
        f"web: python -m ghostless web --app bench.watchers:engine --port P [variant flags]; each size: N users, "
        f"one task page each, opened at once; then {opts.rate:g} progress events/s for {opts.duration:g} s\n"
    )
    print(HEAD, flush=True)
    failed = broken = False
    with private_redis(*AOF_EVERYSEC) as server:  # the persistence ghostless recommends
        client = redis.Redis.from_url(server.url, client_name=BENCH_CLIENT, decode_responses=True)
        # --resume keeps every event of the run in the queue stream, so the pages replay what they
        # missed rather than get a snapshot for a trimmed stream (the web's own stream_maxlen is the default).
        config = Config(stream_maxlen=4 * (max(sizes) + WARM)) if opts.resume else None
        producer = register(
            Engine(
                redis.Redis.from_url(server.url, client_name=BENCH_CLIENT),
                namespace=NS,
                dispatcher=None,
                check=False,
                config=config,
            )
        )
        t0 = time.monotonic()
        watchers = make_watchers(producer, max(sizes) + WARM)
        print(f"(set-up: {len(watchers)} users and claimed tasks in {time.monotonic() - t0:.1f} s)", flush=True)
        for label, flags in variants:
            for n in sizes:
                try:
                    r = run_size(label or "default", flags, n, watchers, server, client, producer, opts)
                except (TimeoutError, RuntimeError) as e:
                    print(f"{label or 'default':<10} {n:>6} did not finish: {e}", flush=True)
                    broken = True
                    continue
                print(row(r))
                print("\n".join(notes(r, opts)))
                if not opts.quick:
                    ok, line = verdicts(r)
                    failed |= not ok
                    print(line)
                print(flush=True)
        client.close()
        producer.redis.close()
    print(
        f"targets (issue 12, at 10,000): all opened within {TARGETS['open_s']:g} s, 0 errors, delivery p99 <= "
        f"{TARGETS['p99_ms']:g} ms, <= {TARGETS['kib']:g} KiB per idle watcher, <= {TARGETS['conns']} Redis "
        "connections per web process"
    )
    return 2 if broken else 1 if failed and not opts.quick else 0


if __name__ == "__main__":
    from bench._common import run_main

    run_main(main)
