"""Recovery latency: from a SIGKILL to another worker entering the task function.

    .venv/bin/python bench/recovery.py [--trials 20] [--cap 120]

Both ends are Redis server TIME: the kill time is read just before ``os.kill``; the entry time is
stamped by the task function as its first action (bench/app.py, bench/plain_jobs.py). Scenarios,
all in one run against one private redis-server:

1. ghostless, work-horse killed (fork worker's child): the parent reports ``worker_lost`` with the
   lease's token and the task is dispatched again at once. Target p99 <= 0.5 s. Sequential trials,
   2 fork workers (the victim's parent or the spare may pick the new job).
2. ghostless, whole worker killed (parent, then horse), at a 5 s lease and at the engine's default
   lease (TaskType.lease = 15 s). One sweeper (``ghostless sweeper``, default --interval 1.0: it
   sleeps until the earliest deadline). Target p99 <= lease + 0.3 s. The trials of one lease run
   concurrently: N victim workers each hold one task, then are killed one by one, ``lease / N`` apart
   (so the reclaims do not pile up on one instant), while 3 idle rescuer workers wait.
3. ghostless, promotion lateness of short retries (bench/lateness.py): retries due 0.2-0.5 s after
   a failure, at random moments of the sweeper's sleep; from ``next_retry_at`` to the promotion.
4. plain RQ 3.0 baselines (RQ defaults, JSON serializer): the same kills of a plain RQ job, with no
   retry (RQ's default) and with ``Retry(max=1)``; a job not re-run within ``--cap`` seconds of its
   kill is reported as not recovered. The whole-worker baselines start first, so their cap runs
   while the ghostless scenarios are measured.

p99 is nearest-rank: with fewer than 100 trials it is the maximum.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import machine, private_redis, run_main, stop  # noqa: E402
from bench.lateness import promotion_lateness  # noqa: E402
from tests.support.procs import Proc, app_env, start_sweeper, start_worker  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

NS = "bench"
APP = "bench.app:engine"
HORSE_TARGET = 0.5
SLACK = 0.3


# -- helpers ----------------------------------------------------------------------------------------


def server_us(r) -> int:
    sec, usec = r.time()
    return int(sec) * 1_000_000 + int(usec)


def entries(r, key: str) -> dict[int, int]:
    """attempt (or run) -> first entry time (us) stamped by the task function."""
    out: dict[int, int] = {}
    for raw in r.lrange(key, 0, -1):
        n, at, _pid = raw.decode().split()
        out.setdefault(int(n), int(at))
    return out


def nearest_rank(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"n={len(values)} p50={nearest_rank(values, 0.5):.3f}s p99={nearest_rank(values, 0.99):.3f}s "
        f"min={min(values):.3f}s mean={statistics.mean(values):.3f}s max={max(values):.3f}s"
    )


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def the_horse(proc: Proc, timeout: float = 10.0) -> int:
    return wait_until(
        lambda: (lambda c: c[0] if len(c) == 1 else None)(proc.children()),
        timeout,
        what=f"the work-horse of pid {proc.pid}",
    )


def registered(r, names: list[str]) -> bool:
    from rq import worker_registration

    keys = {k.decode() if isinstance(k, bytes) else k for k in worker_registration.get_keys(connection=r)}
    return all(f"rq:worker:{n}" in keys for n in names)


def start_named(env, count: int, prefix: str, worker_class: str = "fork", queues=()) -> list[Proc]:
    procs = []
    for i in range(count):
        name = f"{prefix}-{i}-{uuid.uuid4().hex[:6]}"
        p = start_worker(env, APP, worker_class, *queues, name=name)
        p.name = name
        procs.append(p)
    return procs


def start_plain(url: str, queues: list[str], count: int, prefix: str) -> list[Proc]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    procs = []
    for i in range(count):
        p = Proc([sys.executable, "bench/plain_worker.py", url, *queues, "--class", "fork"], env)
        p.name = f"{prefix}-{i}"
        procs.append(p)
    return procs


# -- ghostless: horse killed --------------------------------------------------------------------------
def ghostless_horse(engine, env, r, trials: int, spawned: list) -> list[dict]:
    workers = start_named(env, 2, "horse")
    spawned += workers
    by_name = {w.name: w for w in workers}
    wait_until(lambda: registered(r, list(by_name)), 30, what="horse-scenario workers")
    out = []
    for _ in range(trials):
        task = engine.submit("victim", {}, owner="bench")
        key = f"bench:entered:{task.id}"
        wait_until(lambda: 1 in entries(r, key), 30, what="attempt 1 entered")
        proc = by_name[engine.get(task.id).worker]
        horse = the_horse(proc)
        t_kill = server_us(r)
        kill(horse)
        wait_until(lambda: 2 in entries(r, key), 30, what="attempt 2 entered")
        entered = entries(r, key)[2]
        hist = engine.history(task.id)
        reported = next(e.at for e in hist if e.verb == "fail" and "worker_lost" in e.reason)
        out.append(
            {
                "latency": (entered - t_kill) / 1e6,
                "report": reported - t_kill / 1e6,
                "reason": next(e.reason for e in hist if e.verb == "fail"),
            }
        )
        wait_until(lambda: engine.get(task.id).terminal, 30, what="task done")
    for w in workers:  # they would take the next scenario's tasks
        stop(w)
    return out


# -- ghostless: whole worker killed -----------------------------------------------------------------
def ghostless_whole(engine, env, r, type_name: str, lease: float, n: int, spawned: list) -> list[dict]:
    victims = start_named(env, n, f"whole{int(lease)}")
    spawned += victims
    by_name = {w.name: w for w in victims}
    wait_until(lambda: registered(r, list(by_name)), 60, what="victim workers")
    tasks = [engine.submit(type_name, {}, owner="bench") for _ in range(n)]
    keys = {t.id: f"bench:entered:{t.id}" for t in tasks}
    wait_until(lambda: all(1 in entries(r, k) for k in keys.values()), 60, what="every victim running")
    holders = {t.id: engine.get(t.id).worker for t in tasks}
    assert len(set(holders.values())) == n, "each victim worker should hold exactly one task"
    horses = {tid: the_horse(by_name[w]) for tid, w in holders.items()}
    rescuers = start_named(env, 3, f"rescue{int(lease)}")
    spawned += rescuers
    wait_until(lambda: registered(r, [w.name for w in rescuers]), 60, what="rescuer workers")

    kills, deadlines = {}, {}
    gap = lease / n
    for t in tasks:
        t_kill = server_us(r)
        kill(by_name[holders[t.id]].pid)  # the parent first: it must not report the horse's death
        kill(horses[t.id])
        kills[t.id] = t_kill
        # the lease deadline now fixed (nobody renews it): the sweeper must act at this time
        deadlines[t.id] = int(r.zscore(engine.keys.task(t.id).leases, t.id) or 0)
        time.sleep(gap)
    wait_until(lambda: all(2 in entries(r, k) for k in keys.values()), lease + 60, what="every task re-entered")
    out = []
    for t in tasks:
        entered = entries(r, keys[t.id])[2]
        hist = engine.history(t.id)
        expired = next(e for e in hist if e.verb == "expire")
        out.append(
            {
                "latency": (entered - kills[t.id]) / 1e6,
                "expire_after_kill": expired.at - kills[t.id] / 1e6,
                "entry_after_expire": entered / 1e6 - expired.at,
                "reason": expired.reason,
                "expire_after_deadline": expired.at - deadlines[t.id] / 1000,
            }
        )
    wait_until(lambda: all(engine.get(t.id).terminal for t in tasks), 30, what="every task done")
    for w in rescuers:  # they would take the next scenario's tasks
        stop(w)
    return out


# -- plain RQ baselines -------------------------------------------------------------------------------
def plain_enqueue(r, queue: str, label: str, retry: bool):
    from rq import Queue, Retry
    from rq.serializers import JSONSerializer

    q = Queue(queue, connection=r, serializer=JSONSerializer)
    return q.enqueue("bench.plain_jobs.victim", label, 600.0, job_timeout=900, retry=Retry(max=1) if retry else None)


def plain_whole_start(url: str, r, n: int, spawned: list) -> dict:
    """Start n victims per variant, kill each (parent + horse) as soon as it runs; return kill times."""
    variants = {"no retry (RQ default)": "plain-whole", "Retry(max=1)": "plain-whole-retry"}
    kills = {}
    for variant, queue in variants.items():
        victims = start_plain(url, [queue], n, queue)
        spawned += victims
        labels = []
        for _ in range(n):
            label = f"{queue}-{uuid.uuid4().hex[:8]}"
            plain_enqueue(r, queue, label, retry="retry" in queue)
            labels.append(label)
        wait_until(
            lambda: all(1 in entries(r, f"bench:plain:entered:{lb}") for lb in labels),
            90,
            what=f"plain victims running ({queue})",
        )
        for v in victims:
            horse = the_horse(v)
            t_kill = server_us(r)
            kill(v.pid)
            kill(horse)
            kills[(variant, v.pid)] = t_kill
        kills.update({("labels", variant): labels})
    spawned += start_plain(url, list(variants.values()), 2, "plain-rescue")
    return kills


def plain_whole_result(r, kills: dict, cap: float) -> dict:
    out = {}
    for variant in ("no retry (RQ default)", "Retry(max=1)"):
        labels = kills[("labels", variant)]
        t_kills = sorted(v for k, v in kills.items() if k[0] == variant)
        recovered = []
        for lb in labels:
            e = entries(r, f"bench:plain:entered:{lb}")
            if 2 in e:
                recovered.append(e[2])
        waited = (server_us(r) - max(t_kills)) / 1e6
        out[variant] = {
            "n": len(labels),
            "recovered": len(recovered),
            "waited": waited,
            "latencies": [(e - min(t_kills)) / 1e6 for e in recovered],
        }
    return out


def plain_horse(url: str, r, trials: int, retry: bool, spawned: list, cap_per_trial: float) -> dict:
    queue = "plain-horse-retry" if retry else "plain-horse"
    workers = start_plain(url, [queue], 2, queue)
    spawned += workers
    lat, not_rerun, states = [], 0, {}
    for _ in range(trials):
        label = f"{queue}-{uuid.uuid4().hex[:8]}"
        job = plain_enqueue(r, queue, label, retry)
        key = f"bench:plain:entered:{label}"
        wait_until(lambda: 1 in entries(r, key), 30, what="plain job running")
        proc = next(w for w in workers if w.children())
        horse = the_horse(proc)
        t_kill = server_us(r)
        kill(horse)
        deadline = time.monotonic() + cap_per_trial
        while time.monotonic() < deadline and 2 not in entries(r, key):
            time.sleep(0.005)
        e = entries(r, key)
        if 2 in e:
            lat.append((e[2] - t_kill) / 1e6)
        else:
            not_rerun += 1
        if 2 in e:  # let the re-run finish before the next trial
            wait_until(lambda: job.get_status(refresh=True) in ("finished", "failed"), 30, what="re-run done")
        job.refresh()
        states[str(job.get_status())] = states.get(str(job.get_status()), 0) + 1
    return {"latencies": lat, "not_rerun": not_rerun, "states": states, "waited": cap_per_trial}


# -- main -------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per scenario (>= 20 for the report)")
    ap.add_argument("--cap", type=float, default=120.0, help="seconds to wait for plain RQ to re-run a job")
    ap.add_argument("--plain-whole", type=int, default=5, help="plain RQ whole-worker victims per variant")
    ap.add_argument(
        "--horse-wait",
        type=float,
        default=2.0,
        help="seconds to watch each no-retry plain RQ horse-kill trial (all are checked again at the end, after --cap)",
    )
    a = ap.parse_args()
    print(machine())
    # AOF on (appendfsync everysec), as a ghostless Redis should run; every scenario shares it.
    with private_redis("--appendonly", "yes") as srv:
        os.environ["GHOSTLESS_REDIS_URL"] = srv.url
        os.environ["GHOSTLESS_BENCH_NS"] = NS
        from bench.app import engine

        env = app_env(srv.url, NS, GHOSTLESS_BENCH_NS=NS)
        r = srv.client()
        spawned: list[Proc] = []
        try:
            sweeper = start_sweeper(env, APP, interval=1.0)
            spawned.append(sweeper)
            t0 = time.monotonic()
            print(f"plain RQ whole-worker victims: {a.plain_whole} per variant, killed now; cap {a.cap:.0f}s")
            plain_kills = plain_whole_start(srv.url, r, a.plain_whole, spawned)

            print("ghostless: work-horse killed ...", flush=True)
            horse = ghostless_horse(engine, env, r, a.trials, spawned)
            print("plain RQ: work-horse killed ...", flush=True)
            ph_default = plain_horse(srv.url, r, a.trials, False, spawned, a.horse_wait)
            ph_retry = plain_horse(srv.url, r, a.trials, True, spawned, 30.0)

            print("ghostless: whole worker killed, 5 s lease ...", flush=True)
            whole5 = ghostless_whole(engine, env, r, "victim_5s", 5.0, a.trials, spawned)
            lease_default = engine.registry.get("victim").lease
            print(f"ghostless: whole worker killed, default lease {lease_default:g} s ...", flush=True)
            whole15 = ghostless_whole(engine, env, r, "victim", lease_default, a.trials, spawned)
            print("ghostless: promotion lateness of short retries ...", flush=True)
            late_retries = promotion_lateness(engine, 2 * a.trials)

            left = a.cap - (time.monotonic() - t0)
            if left > 0:
                print(f"waiting {left:.0f}s more for the plain RQ cap ...", flush=True)
                time.sleep(left)
            plain_whole = plain_whole_result(r, plain_kills, a.cap)
            # the no-retry horse-kill jobs, checked again after the full cap
            late = sum(
                1
                for k in r.scan_iter("bench:plain:entered:plain-horse-*")
                if not k.decode().startswith("bench:plain:entered:plain-horse-retry") and 2 in entries(r, k.decode())
            )
            problems = engine.check()
        finally:
            for p in spawned:
                stop(p)

    print()
    print("== recovery latency: SIGKILL -> another worker enters the task function (Redis TIME) ==")
    lat = [x["latency"] for x in horse]
    ok = nearest_rank(lat, 0.99) <= HORSE_TARGET
    print(f"ghostless, horse killed:           {summary(lat)}  target p99<={HORSE_TARGET}s {'PASS' if ok else 'FAIL'}")
    print(f"    kill -> worker_lost recorded:  {summary([x['report'] for x in horse])}")
    print(f"    reason: {horse[0]['reason']!r}")
    results = [ok]
    for lease, rows in ((5.0, whole5), (lease_default, whole15)):
        lat = [x["latency"] for x in rows]
        ok = nearest_rank(lat, 0.99) <= lease + SLACK
        results.append(ok)
        print(
            f"ghostless, whole worker, lease {lease:>4g}s: {summary(lat)}  target p99<={lease + SLACK:g}s "
            f"{'PASS' if ok else 'FAIL'}"
        )
        print(f"    kill -> expire:                {summary([x['expire_after_kill'] for x in rows])}")
        print(f"    lease deadline -> expire:      {summary([x['expire_after_deadline'] for x in rows])}")
        print(f"    expire -> entry:               {summary([x['entry_after_expire'] for x in rows])}")
        print(f"    reasons: {sorted({x['reason'] for x in rows})}")
    print(f"ghostless, promotion lateness of short retries: {summary(late_retries)}")
    print(
        f"plain RQ, horse killed, no retry:  re-run {len(ph_default['latencies'])}/{a.trials} "
        f"within {a.horse_wait:g}s of the kill; re-run later (checked after the cap): {late}; "
        f"job states {ph_default['states']}"
    )
    print(
        f"plain RQ, horse killed, Retry(max=1): {summary(ph_retry['latencies'])}; "
        f"not re-run within 30s: {ph_retry['not_rerun']}; job states {ph_retry['states']}"
    )
    for variant, res in plain_whole.items():
        if res["recovered"]:
            extra = summary(res["latencies"])
        else:
            extra = "-"
        print(
            f"plain RQ, whole worker, {variant}: re-run {res['recovered']}/{res['n']} "
            f"within {res['waited']:.0f}s of the last kill ({extra})"
            + ("" if res["recovered"] else f": NOT RECOVERED within {res['waited']:.0f}s")
        )
    print(f"engine.check(): {problems or 'OK'}")
    return 0 if all(results) and not problems else 1


if __name__ == "__main__":
    run_main(main)
