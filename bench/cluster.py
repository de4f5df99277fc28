"""Redis Cluster: the same lifecycle load on 3 shards and on one redis-server; then failovers under load.

Servers (all private, on loopback): a Cluster of 3 masters + 3 replicas (tests/support/cluster.py,
cluster-node-timeout NODE_TIMEOUT_MS), one standalone redis-server and, as a diagnostic, one
redis-server with a replica; all without AOF (as the cluster nodes start). Client processes (procs)
each run full lifecycles (Engine.submit + claim + complete, one call after another, no executor)
round-robin over 6 queues whose hash tags put 2 queues on each master; the same processes and queues
on every server.

1. Steady state, interleaved rounds (the order rotates): lifecycle rate and its ratio
   cluster/standalone per round (cluster/replicated: the cost of sharding alone); the share of
   commands per master (INFO stats total_commands_processed deltas, max/mean); Redis CPU per
   lifecycle (INFO cpu user+sys deltas, summed over the primaries; the replicas' apart); client CPU
   and lifecycle latency percentiles.
2. Failover, several kills: with the load running, SIGKILL one master (a different shard each
   time), restart it once its replica took over (it rejoins as a replica), and measure the time
   from the SIGKILL until tasks of both its queues complete again. A call that fails is resent at
   its queue's next turn (a claim with the same claim id, a complete with the same lease), so the
   other queues keep going. Checked afterwards, per acknowledged submit: lost (task gone),
   acknowledged claim or complete taken back (not SUCCESS: its work would run again), completed
   twice (two PROCESSING -> SUCCESS transitions in its history, or a queue's entered:SUCCESS
   counter above its SUCCESS count: tests/chaos/soak.py's check). Without wait_replicas, then with
   Config(wait_replicas=1) when an engine on a cluster client accepts it.

Targets: rate cluster/standalone >= 0.9; commands per master max/mean <= 1.5; never a task
completed twice; with wait_replicas=1 no acknowledged write lost or taken back.

Run: .venv/bin/python bench/cluster.py  (about 2 minutes, 3 once wait_replicas=1 works on a cluster);
--smoke: a tiny size for tests/test_bench_smoke.py.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import multiprocessing as mp
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from bench._common import (
    ARGS,
    RESULT,
    Engine,
    commands_processed,
    machine,
    median,
    private_redis,
    quiet_engine_logs,
    run_main,
    server_cpu,
    verdict,
)
from ghostless import Config, GhostlessError, RedisSetupError, ReplicationTimeout
from ghostless.core.keys import BODY_HISTORY
from ghostless.core.models import history_entry
from tests.support.cluster import Cluster, redis_cli_path
from tests.support.replicas import attach
from tests.support.tether import tether

SIZES = {
    "full": {"rounds": 30, "seconds": 0.5, "procs": 4, "kills": 5, "before_kill": 1.0, "calls": 10000, "smoke": False},
    "smoke": {"rounds": 1, "seconds": 0.3, "procs": 2, "kills": 1, "before_kill": 0.2, "calls": 500, "smoke": True},
}
NODE_TIMEOUT_MS = 500
RATIO_TARGET, SHARE_TARGET = 0.9, 1.5
RECOVERY_TIMEOUT = 30.0


# -- the load (in each client process) ------------------------------------------------------------
def make_engine(addr, namespace: str, wait: int, queues: list[str]) -> Engine:
    """An engine on ``addr``: ("cluster", [(host, port), ...]) or ("standalone", port)."""
    kind, where = addr
    timeouts = {"socket_timeout": 2, "socket_connect_timeout": 1}
    if kind == "cluster":
        client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in where], **timeouts)
    else:
        client = redis.Redis(host="127.0.0.1", port=where, **timeouts)
    with quiet_engine_logs():
        engine = Engine(client, namespace=namespace, config=Config(wait_replicas=wait), dispatcher=None)
    for q in queues:
        engine.task(name=f"bench_{q}", queue=q, lease=60, timeout=600)(lambda ctx, prompt: None)
    return engine


class Load:
    """Lifecycles round-robin over the queues. A lifecycle runs through unless a call fails: then it
    is parked where it stopped and resumed at its queue's next turn."""

    def __init__(self, engine: Engine, queues: list[str], worker: str, last_done):
        self.engine, self.queues, self.worker, self.last_done = engine, queues, worker, last_done
        self.parked: list[dict | None] = [None] * len(queues)
        self.submitted: list[str] = []  # acknowledged submits
        # (queue index, monotonic times the complete was sent and answered)
        self.done: list[tuple[int, float, float]] = []
        self.latencies: list[float] = []
        self.errors: collections.Counter = collections.Counter()  # failed calls (retried)
        self.refused: collections.Counter = collections.Counter()  # refusals (the lifecycle is given up)

    def step(self, qi: int) -> bool:
        job = self.parked[qi] or {"stage": "submit", "t0": time.monotonic()}
        self.parked[qi] = None
        e = self.engine
        try:
            if job["stage"] == "submit":
                job.update(stage="claim", id=e.submit(f"bench_{self.queues[qi]}", ARGS, owner="bench").id)
                job["claim_id"] = uuid.uuid4().hex
                self.submitted.append(job["id"])
            if job["stage"] == "claim":
                job.update(stage="complete", lease=e.claim(job["id"], self.worker, claim_id=job["claim_id"]))
            sent = time.monotonic()
            e.complete(job["lease"], RESULT)
        except ReplicationTimeout as exc:  # the write stands on the primary but is not durable: resent
            self.errors[type(exc).__name__] += 1
            self.parked[qi] = job
            return False
        except GhostlessError as exc:  # refused: the failover took an acknowledged write back
            self.refused[f"{job['stage']}: {type(exc).__name__}"] += 1
            return False
        # Redis unreachable or failing over: resent at the queue's next turn
        except (redis.RedisError, RedisClusterException) as exc:
            self.errors[type(exc).__name__] += 1
            self.parked[qi] = job
            return False
        now = time.monotonic()
        self.done.append((qi, sent, now))
        self.latencies.append(now - job["t0"])
        self.last_done[qi] = sent  # a complete sent after a master died was answered by its successor
        return True

    def run(self, seconds: float | None, stop) -> dict:
        cpu0, t0 = time.process_time(), time.monotonic()
        end = t0 + seconds if seconds else float("inf")
        i = 0
        while time.monotonic() < end and not stop.is_set():
            self.step(i % len(self.queues))
            i += 1
        elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
        deadline = time.monotonic() + RECOVERY_TIMEOUT  # finish the parked lifecycles (not timed)
        while any(self.parked) and time.monotonic() < deadline:
            for qi in [qi for qi, job in enumerate(self.parked) if job]:
                self.step(qi) or time.sleep(0.01)
        return {
            "n": len(self.latencies),
            "elapsed": elapsed,
            "cpu": cpu,
            "latencies": self.latencies,
            "submitted": self.submitted,
            "done": self.done,
            "errors": dict(self.errors),
            "refused": dict(self.refused),
            "unfinished": sum(1 for job in self.parked if job),
        }


def client_main(conn, wid: int, addrs: dict, queues: list[str], stop, last_done, tie=None) -> None:
    """A client process: per message (target, namespace, wait, seconds) make or reuse that engine,
    answer "ready", run the load on "go" (seconds, or until ``stop``), send back its figures.
    ``tie``: tests/support/tether.py's, run first, so that the client ends with the bench."""
    if tie:
        tie()
    engines: dict = {}
    while (msg := conn.recv()) is not None:
        target, namespace, wait, seconds = msg
        if (target, namespace, wait) not in engines:
            engine = make_engine(addrs[target], namespace, wait, queues)
            Load(engine, queues, f"w{wid}", [0.0] * len(queues)).run(0.2, stop)  # warm-up: scripts, connections
            engines[target, namespace, wait] = engine
        load = Load(engines[target, namespace, wait], queues, f"w{wid}", last_done)
        conn.send("ready")
        conn.recv()
        conn.send(load.run(seconds, stop))


class Clients:
    """PROCS client processes (forked once, reused by every phase)."""

    def __init__(self, procs: int, addrs: dict, queues: list[str]):
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.last_done = ctx.Array("d", len(queues), lock=False)
        self.conns, self.procs = [], []
        # Killed outright, the bench would leave them running: each holds its own pipe's other end
        # (forked after it was made), so none would see the bench gone.
        tie = tether()
        for wid in range(procs):
            parent, child = ctx.Pipe()
            args = (child, wid, addrs, queues, self.stop, self.last_done, tie)
            proc = ctx.Process(target=client_main, args=args)
            proc.daemon = True
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def start(self, target: str, namespace: str, wait: int = 0, seconds: float | None = None, ready=None) -> float:
        """Every process ready (its engine made and warmed up), ``ready()``, then go; the monotonic
        time of the go."""
        self.stop.clear()
        for conn in self.conns:
            conn.send((target, namespace, wait, seconds))
        for conn in self.conns:
            assert conn.recv() == "ready"
        if ready:
            ready()
        go = time.monotonic()
        for conn in self.conns:
            conn.send("go")
        return go

    def results(self) -> list[dict]:
        return [conn.recv() for conn in self.conns]

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            conn.send(None)
            proc.join(10)
            if proc.is_alive():
                proc.kill()  # this bench's own child, by its handle


# -- queues and servers ---------------------------------------------------------------------------
def masters_by_slots(cluster: Cluster) -> list[tuple[int, list[tuple[int, int]]]]:
    """(port, slot ranges) of each master, by first slot."""
    return sorted(((m.port, cluster.slots_of(m)) for m in cluster.master_nodes()), key=lambda m: m[1][0][0])


def pick_queues(cluster: Cluster, per_master: int = 2) -> tuple[list[str], dict[str, int]]:
    """The first names q0, q1, ... whose tag {q} puts ``per_master`` queues on each master."""
    owner = {}
    for port, ranges in masters_by_slots(cluster):
        for start, end in ranges:
            owner.update(dict.fromkeys(range(start, end + 1), port))
    chosen: dict[str, int] = {}
    for i in range(1000):
        name = f"q{i}"
        port = owner[key_slot(f"{{{name}}}".encode())]
        if list(chosen.values()).count(port) < per_master:
            chosen[name] = port
        if len(chosen) == per_master * len(set(owner.values())):
            break
    return sorted(chosen, key=lambda q: (list(owner.values()).index(chosen[q]), q)), chosen


def snapshot(clients: list) -> list[tuple[float, int]]:
    return [(server_cpu(c), commands_processed(c)) for c in clients]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


# -- 1. steady state ------------------------------------------------------------------------------
def steady(clients: Clients, servers: dict, size: dict) -> dict:
    """``servers``: per target, (its primaries' clients, its replicas' clients)."""
    runs: dict[str, list[dict]] = {t: [] for t in servers}
    # cluster and standalone always one after the other (their ratio is taken per round), in turn first
    orders = [("cluster", "standalone", "replicated"), ("standalone", "cluster", "replicated")]
    orders += [tuple(reversed(o)) for o in orders]
    for i in range(size["rounds"]):
        for target in orders[i % len(orders)]:
            primaries, replicas = servers[target]
            before: list = []
            clients.start(
                target, "steady", seconds=size["seconds"], ready=lambda: before.extend(snapshot(primaries + replicas))
            )
            outs = clients.results()
            deltas = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(snapshot(primaries + replicas), before)]
            n = sum(o["n"] for o in outs)
            runs[target].append(
                {
                    "n": n,
                    "rate": n / max(o["elapsed"] for o in outs),
                    "server_us": sum(d[0] for d in deltas[: len(primaries)]) / n * 1e6,
                    "replica_us": sum(d[0] for d in deltas[len(primaries) :]) / n * 1e6,
                    "client_us": sum(o["cpu"] for o in outs) / n * 1e6,
                    "commands": [d[1] for d in deltas[: len(primaries)]],
                    "latencies": [x for o in outs for x in o["latencies"]],
                }
            )
        if i < 3 or i == size["rounds"] - 1:
            c = runs["cluster"][-1]
            print(
                f"round {i + 1}{' (the last)' if i > 2 else ''}: "
                + ", ".join(f"{t} {r[-1]['rate']:,.0f}/s" for t, r in runs.items())
                + f"; cluster/standalone {c['rate'] / runs['standalone'][-1]['rate']:.2f}; commands per master "
                + ", ".join(f"{x:,}" for x in c["commands"]),
                flush=True,
            )
    return runs


def report_steady(runs: dict, size: dict, per_call: dict) -> list[bool]:
    ratios = [c["rate"] / s["rate"] for c, s in zip(runs["cluster"], runs["standalone"])]
    vs_replicated = median([c["rate"] / s["rate"] for c, s in zip(runs["cluster"], runs["replicated"])])
    shares = [max(c["commands"]) / (sum(c["commands"]) / len(c["commands"])) for c in runs["cluster"]]
    med = {
        t: {k: median([r[k] for r in rs]) for k in ("rate", "server_us", "replica_us", "client_us")}
        for t, rs in runs.items()
    }
    print(
        f"\nsteady state: {size['procs']} client processes, medians over {size['rounds']} rounds of "
        f"{size['seconds']} s per server; load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(
        "| | lifecycles/s | latency p50 / p99 ms | Redis CPU us/lifecycle | commands/lifecycle "
        "| client CPU us/lifecycle |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for target, runs_t in runs.items():
        lat = [x for r in runs_t for x in r["latencies"]]
        m = med[target]
        extra = f" (+ {m['replica_us']:.0f} replicas)" if m["replica_us"] else ""
        print(
            f"| {target} | {m['rate']:,.0f} | {pct(lat, 50) * 1e3:.2f} / {pct(lat, 99) * 1e3:.2f} | "
            f"{m['server_us']:.0f}{extra} | {median([sum(r['commands']) / r['n'] for r in runs_t]):.0f} | "
            f"{m['client_us']:.0f} |"
        )
    ratio, share = median(ratios), median(shares)
    total = {t: m["server_us"] + m["replica_us"] + m["client_us"] for t, m in med.items()}
    redis_cpu = "Redis CPU: summed over the primaries (the cluster's 3 masters), replicas apart."
    print(
        f"\n- rate cluster/standalone: median {ratio:.2f} over {len(ratios)} rounds (p10 {pct(ratios, 10):.2f}, "
        f"p90 {pct(ratios, 90):.2f}) "
        f"[target >= {RATIO_TARGET}] {verdict(ratio >= RATIO_TARGET)}; cluster/replicated {vs_replicated:.2f} "
        "(diagnostic: the same replication on both sides)\n"
        f"- commands per master, max/mean: median {share:.2f} (highest round {max(shares):.2f}) "
        f"[target <= {SHARE_TARGET}] {verdict(share <= SHARE_TARGET)}\n"
        "- what the ratio means here: this machine has 2 cores for the 3 masters, their 3 replicas and the "
        "client processes, all busy at once. A cluster brings no CPU here, only more processes, replication "
        "and the cluster client's slot routing, so it cannot be faster than one redis-server (but by "
        "noise): the ratio is the cluster's cost per lifecycle at equal CPU, not its scale-out. All CPU "
        f"per lifecycle (client + Redis, replicas included): cluster {total['cluster']:.0f} us, "
        f"standalone {total['standalone']:.0f} us; "
        f"on shared cores that alone predicts a ratio of {total['standalone'] / total['cluster']:.2f}. Client "
        f"CPU per call (one process, GET of one key): redis.Redis {per_call['standalone']:.0f} us, "
        f"RedisCluster {per_call['cluster']:.0f} us. With a core per shard and clients on their own hosts, "
        "each master carries a third of the lifecycles (the command shares above) at its own Redis CPU per "
        "lifecycle, and the rate grows with the shards until the clients are the limit.\n"
        f"- {redis_cpu}"
    )
    return [ratio >= RATIO_TARGET, share <= SHARE_TARGET]


def per_call_cpu(cluster: Cluster, standalone, n: int) -> dict:
    """Client CPU (us) of one GET through each kind of client, in this process."""
    out = {}
    for target, client in (("cluster", cluster.client()), ("standalone", standalone.client())):
        client.get("{q0}:probe")
        cpu0 = time.process_time()
        for _ in range(n):
            client.get("{q0}:probe")
        out[target] = (time.process_time() - cpu0) / n * 1e6
        client.close()
    return out


# -- 2. failover ----------------------------------------------------------------------------------
def failover(clients: Clients, cluster: Cluster, queues: list[str], size: dict, wait: int) -> list[dict]:
    runs = []
    for k in range(size["kills"]):
        namespace = f"fo{wait}k{k}"
        port, ranges = masters_by_slots(cluster)[k % 3]
        victim = next(m for m in cluster.master_nodes() if m.port == port)
        hit = [qi for qi, q in enumerate(queues) if any(a <= key_slot(f"{{{q}}}".encode()) <= b for a, b in ranges)]
        go = clients.start("cluster", namespace, wait)
        last = clients.last_done
        _wait(lambda: all(last[qi] > go for qi in range(len(queues))), "every queue completing tasks")
        time.sleep(size["before_kill"])  # the load runs on every shard before the kill (timed, not awaited)
        t_kill = time.monotonic()
        cluster.kill(victim)  # SIGKILL, then waits until the process is gone
        t_dead = time.monotonic()
        cluster.wait_failover(victim, timeout=RECOVERY_TIMEOUT)
        t_promoted = time.monotonic()
        cluster.restart(victim, timeout=RECOVERY_TIMEOUT)  # rejoins as a replica of the promoted one
        _wait(lambda: all(last[qi] > t_dead for qi in hit), "the killed master's queues completing tasks again")
        time.sleep(0.3)
        clients.stop.set()
        outs = clients.results()
        cluster.wait_replicas_synced(RECOVERY_TIMEOUT)
        done = sorted(d for o in outs for d in o["done"])
        # a complete sent after the process was gone that was answered: served by the promoted replica
        back = max(min(t for qi2, sent, t in done if qi2 == qi and sent > t_dead) for qi in hit)
        others = [t for qi, _, t in done if qi not in hit and t_kill - 1 <= t <= back]
        run = {
            "killed": port,
            "queues": [queues[qi] for qi in hit],
            "recovery": back - t_kill,
            "promoted": t_promoted - t_kill,
            "other_gap": max((b - a for a, b in itertools.pairwise(others)), default=float("nan")),
            "errors": sum(sum(o["errors"].values()) for o in outs),
            "refused": collections.Counter(),
            "unfinished": sum(o["unfinished"] for o in outs),
            **check(cluster, namespace, queues, outs),
        }
        for o in outs:
            run["refused"].update(o["refused"])
        runs.append(run)
        print(
            f"kill {k + 1} (wait_replicas={wait}): master :{port} ({', '.join(run['queues'])}) -> completing "
            f"again after {run['recovery'] * 1e3:,.0f} ms (slots served again after {run['promoted'] * 1e3:,.0f} "
            f"ms); lost {run['lost']}, taken back {run['taken_back']}, twice {run['twice']}, "
            f"failed calls {run['errors']}, refused {dict(run['refused']) or 0}, unfinished {run['unfinished']}",
            flush=True,
        )
    return runs


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + RECOVERY_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {RECOVERY_TIMEOUT}s waiting for {what}")
        time.sleep(0.005)


def check(cluster: Cluster, namespace: str, queues: list[str], outs: list[dict]) -> dict:
    """Every acknowledged submit against the cluster's records after the failover."""
    engine = make_engine(("cluster", cluster.startup_nodes), namespace, 0, queues)
    submitted = [t for o in outs for t in o["submitted"]]
    lost = taken_back = twice = 0
    for start in range(0, len(submitted), 500):
        chunk = submitted[start : start + 500]
        pipe = engine.redis.pipeline(transaction=False)
        for tid in chunk:
            keys = engine.keys.task(tid)
            pipe.hget(keys.task, "status")
            pipe.lrange(keys.body, BODY_HISTORY, -1)
        replies = pipe.execute()
        for i in range(len(chunk)):
            status, history = replies[2 * i], [history_entry(e) for e in replies[2 * i + 1]]
            if status is None:
                lost += 1
                continue
            taken_back += status != b"SUCCESS"  # every lifecycle ran to its complete or was refused
            successes = [e for e in history if e.get("kind") == "transition" and e.get("to") == "SUCCESS"]
            twice += len(successes) > 1
    stats = engine.stats()
    excess = sum(max(0, s["entered"].get("SUCCESS", 0) - s["counts"].get("SUCCESS", 0)) for s in stats.values())
    engine.redis.close()
    return {"lost": lost, "taken_back": taken_back, "twice": twice + excess, "submitted": len(submitted)}


def report_failover(label: str, runs: list[dict]) -> tuple[bool, bool]:
    rec = [r["recovery"] * 1e3 for r in runs]
    lost, back, twice = (sum(r[k] for r in runs) for k in ("lost", "taken_back", "twice"))
    gap = max(r["other_gap"] for r in runs) * 1e3
    print(
        f"| {label} | {len(runs)} | {pct(rec, 50):,.0f} / {pct(rec, 99):,.0f} | "
        f"{median([r['promoted'] * 1e3 for r in runs]):,.0f} | {gap:,.0f} | {sum(r['submitted'] for r in runs):,} | "
        f"{lost} | {back} | {twice} |"
    )
    return lost + back == 0, twice == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny size (tests/test_bench_smoke.py)")
    size = SIZES["smoke" if parser.parse_args(argv).smoke else "full"]
    if redis_cli_path() is None:
        raise SystemExit("redis-cli is not installed (apt-get install redis-tools)")
    print(machine())
    with private_redis() as standalone, private_redis() as primary, private_redis() as replica:
        attach(replica, primary)
        cluster = Cluster(node_timeout_ms=NODE_TIMEOUT_MS).start()
        try:
            return run(cluster, standalone, (primary, replica), size)
        finally:
            cluster.close()


def run(cluster: Cluster, standalone, pair, size: dict) -> int:
    queues, port_of = pick_queues(cluster)
    print(
        f"cluster: 3 masters + 3 replicas, cluster-node-timeout {NODE_TIMEOUT_MS} ms; standalone: one "
        "redis-server, no replica; replicated (diagnostic): one redis-server and its replica; all without "
        "AOF; queues (hash tag -> slot -> master): "
        + ", ".join(f"{{{q}}} {key_slot(f'{{{q}}}'.encode())} :{port_of[q]}" for q in queues)
    )
    addrs = {
        "cluster": ("cluster", cluster.startup_nodes),
        "standalone": ("standalone", standalone.port),
        "replicated": ("standalone", pair[0].port),
    }
    servers = {
        "cluster": ([m.client() for m in cluster.master_nodes()], [r.client() for r in cluster.replica_nodes()]),
        "standalone": ([standalone.client()], []),
        "replicated": ([pair[0].client()], [pair[1].client()]),
    }
    clients = Clients(size["procs"], addrs, queues)
    try:
        masters = {m.port for m in cluster.master_nodes()}
        runs = steady(clients, servers, size)
        ok = report_steady(runs, size, per_call_cpu(cluster, standalone, size["calls"]))
        if {m.port for m in cluster.master_nodes()} != masters:
            print("WARNING: a master failed over during the steady state (an overloaded node missed the node timeout)")
        print()
        variants = {"wait_replicas=0": failover(clients, cluster, queues, size, 0)}
        try:
            make_engine(("cluster", cluster.startup_nodes), "probe", 1, queues).redis.close()
        except RedisSetupError as e:
            w1 = f"not supported by this build ({e})"
        else:
            try:
                variants["wait_replicas=1"] = failover(clients, cluster, queues, size, 1)
                w1 = "measured"
            except RuntimeError as e:  # accepted, but the load never got going or never came back
                w1 = f"FAILED: {e}"
                clients.stop.set()
                clients.results()
    finally:
        clients.close()
    print(f"\nfailover: SIGKILL of a master under load ({size['procs']} client processes over the 6 queues)")
    print(
        "| | kills | back to completing, p50 / p99 ms | slots served again ms (median) | longest pause on "
        "other shards ms | acked submits | lost | acked claim/complete taken back | completed twice |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    outcome = {label: report_failover(label, runs) for label, runs in variants.items()}
    if "wait_replicas=1" not in variants:
        print(f"| wait_replicas=1 | {w1.split(' (')[0]} | | | | | | | |")
    print(
        f"\n- back to completing: from the SIGKILL to the first completed task on each of the killed "
        f"master's 2 queues (the later of the two); with {size['kills']} kills p99 is the maximum. It is "
        f"the failure detection (cluster-node-timeout {NODE_TIMEOUT_MS} ms), the replica's election, then "
        "the client learning the new slot map (redis-py retries a failed call with backoff).\n"
        "- longest pause on other shards: the longest time without a completed task on the other masters' "
        "queues between the SIGKILL and the recovery. Each client process runs its queues in turn on one "
        "thread, and redis-py's cluster client retries a call to the dead master (10 times, backoff up to "
        "1 s) until the slot map names its successor: that process's other queues wait meanwhile, as an "
        "RQ worker serving queues on several shards would.\n"
        "- lost: acknowledged submits whose task is gone; taken back: tasks whose claim or complete was "
        "acknowledged but that are not SUCCESS afterwards (their work would run again); completed twice: "
        "two PROCESSING -> SUCCESS transitions in a task's history, or entered:SUCCESS above SUCCESS.\n"
        f"- wait_replicas=1: {w1}. The killed master is restarted as soon as its replica took over: "
        "until it has synced, the promoted master has no replica, so a write waiting for one raises "
        "ReplicationTimeout after wait_timeout and is resent."
    )
    twice_ok = all(v[1] for v in outcome.values())
    w1_verdict = f"no acked write lost {verdict(outcome['wait_replicas=1'][0])}" if "wait_replicas=1" in outcome else w1
    checks = [*ok, twice_ok, not w1.startswith("FAILED")] + [v[0] for k, v in outcome.items() if k != "wait_replicas=0"]
    print(
        f"\ncluster: rate ratio {verdict(ok[0])}, command share {verdict(ok[1])}, never completed twice "
        f"{verdict(twice_ok)}, wait_replicas=1 {w1_verdict} | {verdict(all(checks))}"
    )
    if size["smoke"]:
        print("(smoke size: the figures mean nothing and the targets are not judged)")
        return 0
    return 0 if all(checks) else 1


if __name__ == "__main__":
    run_main(main)
