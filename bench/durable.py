"""Durable acknowledgements: what ``Config(wait_replicas=1)`` costs per task lifecycle.

Two private redis-servers on loopback: a primary (AOF, appendfsync everysec: the persistence
ghostless recommends) and its replica (``replicaof``). Two engines on the same primary, one with
``wait_replicas=0`` (the default: no WAIT), one with ``wait_replicas=1`` (each write: one pipeline
[EVALSHA, WAIT 1] on one connection). Phases interleaved for ROUNDS rounds, medians reported:
  lifecycle-w0 / lifecycle-w1   Engine.submit + claim + heartbeat + complete, one call after another
Then the same on a private Redis Cluster (3 masters + 3 replicas: tests/support/cluster.py; AOF
everysec set on the masters): the queue on one shard, each write [EVALSHA, WAIT 1] on one
connection to that shard's primary.
Per lifecycle: wall time (latency), client CPU, primary's redis-server CPU. The replica shares the
machine's 2 cores, so its apply work lands in the wall time of w1 as it would on one host; across
hosts the network round trip to the replica adds to it.

Target: wait_replicas=1 keeps >= 0.4 x the lifecycle rate of wait_replicas=0 on loopback (each
write waits for one more hop: primary -> replica -> ACK; the replica ACKs on its own, within its
event loop, and is prompted by the primary's REPLCONF GETACK at each WAIT).

Run: .venv/bin/python bench/durable.py  (about 40 s)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    AOF_EVERYSEC,
    ARGS,
    RESULT,
    Engine,
    Timer,
    machine,
    median,
    persistence,
    private_redis,
    quiet_engine_logs,
    run_main,
    server_cpu,
    verdict,
)
from ghostless import Config
from tests.support.cluster import Cluster, redis_cli_path
from tests.support.replicas import attach
from tests.support.wait import wait_until

ROUNDS, N = 7, 300
TYPE = "bench_job"
RATIO_TARGET = 0.4


def engine_on(client, replicas: int) -> Engine:
    with quiet_engine_logs():
        engine = Engine(client, namespace="bench", config=Config(wait_replicas=replicas), dispatcher=None)

    @engine.task(name=TYPE, queue="durable", lease=60, timeout=600)
    def bench_job(ctx, prompt):  # pragma: no cover - never run
        return None

    return engine


def lifecycles(engine: Engine, n: int) -> None:
    for _ in range(n):
        task = engine.submit(TYPE, ARGS, owner="bench")
        lease = engine.claim(task.id, "w1")
        engine.heartbeat(lease)
        engine.complete(lease, RESULT)


def measure(node, engine: Engine, n: int) -> dict:
    """``n`` lifecycles on ``engine``; ``node``: a client of the primary that takes them (its CPU)."""
    cpu0 = server_cpu(node)
    with Timer() as t:
        lifecycles(engine, n)
    return {
        "rate": n / t.wall,
        "latency_us": t.wall / n * 1e6,
        "client_us": t.cpu / n * 1e6,
        "server_cpu_us": (server_cpu(node) - cpu0) / n * 1e6,
    }


def aof_busy(node) -> bool:
    info = node.info("persistence")
    return bool(int(info["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"]))


def wait_calls(node) -> int:
    return int(node.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def compare(label: str, client, node) -> float:
    """Interleaved rounds of w0 and w1 engines on ``client``; prints them; returns the rate ratio."""
    engines = {"lifecycle-w0": engine_on(client, 0), "lifecycle-w1": engine_on(client, 1)}
    for engine in engines.values():
        lifecycles(engine, 20)  # scripts loaded, connections made
    waits0 = wait_calls(node)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for _ in range(ROUNDS):
        for name, engine in engines.items():
            runs[name].append(measure(node, engine, N))
    waits = wait_calls(node) - waits0
    med = {name: {k: median([run[k] for run in rs]) for k in rs[0]} for name, rs in runs.items()}
    for name, m in med.items():
        print(
            f"{label} {name:14s} {m['rate']:8,.0f} lifecycles/s  {m['latency_us']:7.0f} us/lifecycle  "
            f"client {m['client_us']:5.0f} us  primary CPU {m['server_cpu_us']:5.0f} us"
        )
    per_life = waits / (ROUNDS * N)
    w0, w1 = med["lifecycle-w0"], med["lifecycle-w1"]
    ratio = w1["rate"] / w0["rate"]
    print(f"{label} WAIT commands per wait_replicas=1 lifecycle: {per_life:.2f} (4 writes)")
    print(
        f"{label} durable: wait_replicas=1 costs {w1['latency_us'] - w0['latency_us']:.0f} us per lifecycle "
        f"({(w1['latency_us'] - w0['latency_us']) / 4:.0f} us per write); rate ratio w1/w0 = {ratio:.2f} "
        f"[target >= {RATIO_TARGET}] {verdict(ratio >= RATIO_TARGET)}"
    )
    return ratio


def main() -> int:
    print(machine())
    print(f"durable bench: {ROUNDS} interleaved rounds of {N} lifecycles (submit, claim, heartbeat, complete)")
    with private_redis(*AOF_EVERYSEC) as primary, private_redis() as replica:
        attach(replica, primary)
        r = primary.client()
        print(f"primary: {persistence(r)}; replica: {persistence(replica.client())}; both on loopback")
        ratios = [compare("one Redis:", r, r)]
    if redis_cli_path() is None:
        print("cluster: skipped (redis-cli is not installed)")
    else:
        cluster = Cluster().start()
        try:
            for master in cluster.master_nodes():  # the persistence of the one-Redis primary
                master.client().config_set("appendonly", "yes")
                master.client().config_set("appendfsync", "everysec")
            for master in cluster.master_nodes():
                wait_until(lambda m=master: not aof_busy(m.client()), timeout=30, what="AOF rewrite done")
            client = cluster.client()
            node = cluster.node_for_key(engine_on(client, 0).keys.queue_key("durable", "index")).client()
            print(f"\ncluster: 3 masters + 3 replicas on loopback ({persistence(node)}); the queue's shard")
            ratios.append(compare("cluster:  ", client, node))
        finally:
            cluster.close()
    return 0 if min(ratios) >= RATIO_TARGET else 1


if __name__ == "__main__":
    run_main(main)
