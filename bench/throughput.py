"""Throughput: no-op tasks through ghostless on RQ vs the same jobs on plain RQ 3.0.

    .venv/bin/python bench/throughput.py [--tasks 5000] [--rounds 10] [--workers 2] [--classes simple,fork]

For each worker class (``simple``, then ``fork``), 2 ghostless workers (``ghostless worker``) and 2
plain RQ workers (bench/plain_worker.py: RQ defaults, JSON serializer) run side by side on one
private redis-server (AOF on, everysec), all at log level WARNING. For ``fork`` a third side,
``plain+resolved``, runs plain RQ workers given the one fix of ghostless's worker that plain RQ
could also take: redis-py's DriverInfo resolved once for the pool (redis-py 8 otherwise reads its
package metadata for every new connection, and a work-horse opens one per job); ``--no-resolved``
skips it. ``--tasks`` per side are split
into ``--rounds`` rounds, interleaved (the order rotates every round). A round:

1. every worker of the side is made busy with a plain RQ ``gate`` job that blocks on a Redis list;
2. the round's jobs are enqueued (ghostless: ``Engine.submit`` -> submit script, RQ enqueue,
   dispatch script; plain: ``Queue.enqueue_many``) -- not timed: the producer is not measured;
3. the clock starts when the gates are released and stops when RQ's finished-job registry of the
   side's queue has grown by the round's jobs (+ gates), polled every 5 ms.

So each figure is the workers' drain rate: dequeue, (fork,) run, finish, for every job. Per side
it also prints the CPU per job of the workers (their reaped work-horses included, from /proc) and of
redis-server (INFO cpu), and the Redis commands per job the server executed (INFO commandstats,
commands run inside scripts included).

Then (``--horse-jobs``, default 200) one fork worker a side in burst mode over that many no-op
jobs, with a probe in every work-horse (bench/horse_probe.py): the pages each horse copied (minor
faults) and its wall time, at each phase of a job, median over the horses; and per job, the CPU
and faults of the worker and its horses. A fork worker's cost is mostly the kernel's copies of
the parent's pages its horse writes (about 3.5 us each on this project's machine): this shows
which phase copies them, plain RQ's (with redis-py's DriverInfo resolved once) beside.

Then (``--profile-jobs``, default 500) the same no-op jobs in one in-process SimpleWorker in burst
mode: wall time per job, Redis round trips (socket writes: a pipeline is one) and commands per job
on the worker side, and the wall time of each ghostless step (claim, checkpoints read, heartbeat
thread start, complete); ``--show-profile`` adds cProfile tables. In burst mode RQ pops a worker's
lists with LPOP (no blocking pop); a ghostless queue is one RQ list, as a plain RQ queue is.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import machine, private_redis, run_main, stop  # noqa: E402
from tests.support.procs import Proc, app_env  # noqa: E402
from tests.support.tether import tether  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

NS = "bench"
APP = "bench.app:engine"
TARGET = 1.0  # issue 15: no slower than plain RQ, like for like
G_QUEUE = f"{NS}.tput"  # the RQ queue of ghostless queue "tput" (engine/rq_dispatch.rq_queue_name)
P_QUEUE = "plain-tput"


def registered(r, names) -> bool:
    from rq import worker_registration

    keys = {k.decode() if isinstance(k, bytes) else k for k in worker_registration.get_keys(connection=r)}
    return all(f"rq:worker:{n}" in keys for n in names)


def redis_cpu(r) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


BENCH_OWN = ("zcard", "info")  # the bench's own polling (neither RQ nor ghostless sends them per job)


def script_calls(r) -> dict:
    """Calls per command (INFO commandstats), without the commands the bench itself sends."""
    return {
        k[len("cmdstat_") :]: int(v["calls"])
        for k, v in r.info("commandstats").items()
        if k[len("cmdstat_") :] not in BENCH_OWN
    }


def finished(r, queue: str) -> int:
    return r.zcard(f"rq:finished:{queue}")


class Side:
    """One side of the comparison: how to start its workers, gate them and enqueue its jobs.

    kind: ``ghostless`` (engine queue ``tput``), ``plain`` (RQ queue ``plain-tput``) or
    ``plain+resolved`` (RQ queue ``plain-tput-resolved``: plain RQ workers whose redis-py pool has
    its DriverInfo resolved once, as ghostless's worker does).
    """

    def __init__(self, kind: str, engine, r, url: str, env: dict):
        self.kind, self.engine, self.r, self.url = kind, engine, r, url
        self.task_queue = "tput" if kind == "ghostless" else None
        # the RQ queue
        self.queue = f"{NS}.{self.task_queue}" if self.task_queue else P_QUEUE + kind[len("plain") :].replace("+", "-")
        self.env = env
        self.workers: list[Proc] = []
        self.cpu_ms: list[float] = []  # per round: worker CPU ms per job
        self.redis_ms: list[float] = []  # per round: redis-server CPU ms per job
        self.cmds: list[dict] = []  # per round: Redis commands (server side, INFO commandstats) per job

    def start(self, n: int, worker_class: str) -> None:
        names = []
        for i in range(n):
            name = f"{self.kind.replace('+', '-')}-{worker_class}-{i}-{uuid.uuid4().hex[:6]}"
            if self.task_queue:
                args = [
                    sys.executable,
                    "worker.py",
                    "--app",
                    APP,
                    "--worker-class",
                    worker_class,
                    "--log-level",
                    "WARNING",
                    "--name",
                    name,
                    self.task_queue,
                ]
                p = Proc(args, self.env)
            else:
                env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
                resolved = ["--resolve-driver-info"] if self.kind == "plain+resolved" else []
                p = Proc(
                    [
                        sys.executable,
                        "bench/plain_worker.py",
                        self.url,
                        self.queue,
                        "--class",
                        worker_class,
                        "--log-level",
                        "WARNING",
                        *resolved,
                    ],
                    env,
                )
                name = None
            self.workers.append(p)
            names.append(name)
        if self.task_queue:
            wait_until(lambda: registered(self.r, names), 60, what="ghostless workers")
        else:
            from rq import Queue, Worker

            wait_until(
                lambda: Worker.count(connection=self.r, queue=Queue(self.queue, connection=self.r)) >= n,
                60,
                what="plain workers",
            )

    def stop(self) -> None:
        for p in self.workers:
            stop(p)
        self.workers = []

    def enqueue(self, n: int) -> None:
        if self.task_queue:
            for i in range(n):
                self.engine.submit("noop", {"n": i}, owner="bench")
        else:
            from rq import Queue
            from rq.serializers import JSONSerializer

            q = Queue(self.queue, connection=self.r, serializer=JSONSerializer)
            for start in range(0, n, 500):
                q.enqueue_many(
                    [Queue.prepare_data("bench.plain_jobs.noop", args=(i,)) for i in range(start, min(n, start + 500))]
                )

    def round(self, n: int) -> float:
        """Seconds for the side's workers to drain n queued no-op jobs."""
        gates = len(self.workers)
        self.r.delete("bench:gate", "bench:gate:waiting")
        # Gates are plain RQ jobs on both sides: submitting a ghostless task to an idle worker can
        # hit the dispatch race described in the report (the job's claim is refused as not current).
        from rq import Queue
        from rq.serializers import JSONSerializer

        Queue(self.queue, connection=self.r, serializer=JSONSerializer).enqueue_many(
            [Queue.prepare_data("bench.plain_jobs.gate", args=(i,)) for i in range(gates)]
        )
        wait_until(lambda: int(self.r.get("bench:gate:waiting") or 0) >= gates, 60, what="workers on gates")
        base = finished(self.r, self.queue)
        self.enqueue(n)
        goal = base + n + gates
        cpu0, redis0, calls0 = self.cpu(), redis_cpu(self.r), script_calls(self.r)
        t0 = time.perf_counter()
        self.r.rpush("bench:gate", *["go"] * gates)
        while finished(self.r, self.queue) < goal:
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        calls1 = script_calls(self.r)
        self.cpu_ms.append((self.cpu() - cpu0) / n * 1000)
        self.redis_ms.append((redis_cpu(self.r) - redis0) / n * 1000)
        self.cmds.append({k: (v - calls0.get(k, 0)) / n for k, v in calls1.items() if v - calls0.get(k, 0)})
        return elapsed

    def cpu(self) -> float:
        """CPU seconds of the side's worker processes, their reaped work-horses included."""
        total = 0
        for p in self.workers:
            try:
                fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        return total / os.sysconf("SC_CLK_TCK")


def compare(sides: list, worker_class: str, tasks: int, rounds: int, workers: int) -> dict:
    """Drain rates of each side, rounds interleaved (the order rotates every round)."""
    for s in sides:
        s.start(workers, worker_class)
    try:
        for s in sides:  # warm-up: imports, connections, script cache
            s.round(50)
            s.cpu_ms, s.redis_ms, s.cmds = [], [], []
        per = tasks // rounds
        times = {s.kind: [] for s in sides}
        for i in range(rounds):
            for s in sides[i % len(sides) :] + sides[: i % len(sides)]:
                times[s.kind].append(s.round(per))
                print(
                    f"  {worker_class} round {i + 1:2d} {s.kind:17s} {per / times[s.kind][-1]:6.0f} jobs/s", flush=True
                )
    finally:
        for s in sides:
            s.stop()
    rate = {k: per * rounds / sum(v) for k, v in times.items()}
    out = {"rate": rate, "ratio": {}, "round_ratios": {}, "cpu": {}, "cmds": {}}
    for s in sides:
        k = s.kind
        out["ratio"][k] = rate[k] / rate["plain"]
        out["round_ratios"][k] = [p / g for g, p in zip(times[k], times["plain"])]
        out["cpu"][k] = (statistics.mean(s.cpu_ms), statistics.mean(s.redis_ms))
        keys = set().union(*s.cmds)
        out["cmds"][k] = {c: statistics.mean(d.get(c, 0) for d in s.cmds) for c in keys}
    return out


# -- profile: round trips and time per job in an in-process SimpleWorker ------------------------------
class TripCounter:
    """Counts socket writes (round trips: a pipeline is one) and command names on every connection."""

    def __init__(self):
        import redis.client
        import redis.connection

        self.trips = 0
        self.commands = collections.Counter()
        self._patches = []
        counter = self
        conn_cls = redis.connection.AbstractConnection
        send = conn_cls.send_packed_command
        execute = redis.client.Redis.execute_command
        pipe_execute = redis.client.Pipeline.execute

        def send_packed_command(self, command, check_health=True):
            counter.trips += 1
            return send(self, command, check_health)

        def execute_command(self, *args, **options):
            counter.commands[_name(args)] += 1
            return execute(self, *args, **options)

        def pipeline_execute(self, raise_on_error=True):
            for args, _ in self.command_stack:
                counter.commands["pipe:" + _name(args)] += 1
            return pipe_execute(self, raise_on_error)

        self._patches = [
            (conn_cls, "send_packed_command", send),
            (redis.client.Redis, "execute_command", execute),
            (redis.client.Pipeline, "execute", pipe_execute),
        ]
        conn_cls.send_packed_command = send_packed_command
        redis.client.Redis.execute_command = execute_command
        redis.client.Pipeline.execute = pipeline_execute

    def undo(self) -> None:
        for cls, name, fn in self._patches:
            setattr(cls, name, fn)

    def reset(self) -> None:
        self.trips = 0
        self.commands.clear()


def _name(args) -> str:
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    if name.upper() in ("EVALSHA", "EVAL", "FCALL", "FCALL_RO") and len(args) > 3:
        key = args[3].decode() if isinstance(args[3], bytes) else str(args[3])
        return f"{name.upper()}({_script_of(key, args)})"
    return name.upper()


_SHA_NAMES: dict[str, str] = {}


def _script_of(first_key: str, args) -> str:
    sha = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
    return _SHA_NAMES.get(sha, sha[:8])


class StepTimer:
    """Wall time spent in the ghostless steps of an attempt, measured by wrapping them."""

    STEPS = (
        ("claim", "engine", "claim"),
        ("checkpoints read", "engine", "checkpoints"),
        ("heartbeat thread start", "heartbeat", "start"),
        ("complete", "engine", "complete"),
        ("run_task total", "runner", "run_task"),
    )

    def __init__(self, engine):
        import ghostless.execution.heartbeat as hb_mod
        import ghostless.execution.runner as runner_mod

        self.total = collections.Counter()
        self._undo = []
        owners = {"engine": engine, "heartbeat": hb_mod.Heartbeat, "runner": runner_mod}
        for label, owner, attr in self.STEPS:
            target = owners[owner]
            fn = getattr(target, attr)
            self._undo.append((target, attr, target.__dict__.get(attr) if owner != "engine" else None))
            setattr(target, attr, self._timed(label, fn))

    def _timed(self, label, fn):
        total = self.total

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total[label] += time.perf_counter() - t0

        return timed

    def undo(self) -> None:
        for target, attr, original in self._undo:
            if original is None:
                delattr(target, attr)  # the engine instance: back to the bound method
            else:
                setattr(target, attr, original)


HORSE_PHASES = {  # mark -> the phase that ends there, of a work-horse's job
    "perform_job": "fork -> RQ's perform_job",  # faults from the fork, time from RQ's main_work_horse
    "connect": "RQ's start of the job, to its first command",
    "connect_end": "the horse's connection to Redis",
    "claim": "RQ's start of the job, the rest",
    "claim_end": "ghostless: claim",
    "attempt": "ghostless: after the claim",
    "heartbeat_start": "ghostless: the attempt's span, context",
    "heartbeat_start_end": "ghostless: heartbeat thread start",
    "function": "ghostless: args bound, before the call",
    "function_end": "the task function (a no-op)",
    "complete": "ghostless: result checked",
    "complete_end": "ghostless: complete",
    "attempt_end": "ghostless: the attempt's end",
    "perform_job_end": "RQ's end of the job",
    "exit": "to the horse's exit",
}


def horse_phases(engine, r, url: str, n: int) -> dict:
    """One fork worker a side in burst mode over ``n`` no-op jobs, a probe in each work-horse: per
    side, the median faults and microseconds of each phase, and per job the CPU (ms) and faults of
    the worker and its reaped horses."""
    import tempfile

    from rq import Queue
    from rq.serializers import JSONSerializer

    from bench.horse_probe import PLAIN_QUEUE

    def burst(side: str, path: str, timeout: float = 60 + n):
        """The probe worker's CPU (s) and faults, with its horses; RuntimeError if it failed or hung."""
        env = dict(os.environ, PYTHONPATH=str(ROOT), GHOSTLESS_BENCH_NS=NS)
        args = [sys.executable, str(ROOT / "bench" / "horse_probe.py"), side, url, path]
        proc = subprocess.Popen(args, env=env, preexec_fn=tether())
        deadline = time.monotonic() + timeout
        while (reaped := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"the {side} probe worker did not finish within {timeout:.0f} s")
            time.sleep(0.05)
        _, status, usage = reaped
        if status:
            raise RuntimeError(f"the {side} probe worker exited with status {os.waitstatus_to_exitcode(status)}")
        return usage.ru_utime + usage.ru_stime, usage.ru_minflt

    out = {}
    for side in ("ghostless", "plain"):
        idle_cpu, idle_faults = burst(side, os.devnull)  # its start-up and stop, subtracted below
        if side == "ghostless":
            for i in range(n):
                engine.submit("noop", {"n": i}, owner="bench")
        else:
            q = Queue(PLAIN_QUEUE, connection=r, serializer=JSONSerializer)
            q.enqueue_many([Queue.prepare_data("bench.plain_jobs.noop", args=(i,)) for i in range(n)])
        with tempfile.NamedTemporaryFile("r", suffix=".horses") as lines:
            cpu, faults = burst(side, lines.name)
            rows = [dict(kv.split("=") for kv in line.split()) for line in lines.read().splitlines()]
        marks = {tuple(row) for row in rows}
        if len(rows) != n or len(marks) != 1:  # a job that took another path (failed, refused) marks others
            raise RuntimeError(f"{side}: {len(rows)} horses of {n}, marking {len(marks)} different paths")
        rows = rows[len(rows) // 10 :]  # the first horses warm the server and the parent up
        phases, prev = [], (0, 0)  # faults count from the fork, time from the horse's first mark
        for mark in rows[0]:
            at_faults = statistics.median(int(row[mark].split(",")[0]) for row in rows)
            us = statistics.median(int(row[mark].split(",")[1]) for row in rows)
            if mark == "horse":  # RQ's main_work_horse begins: the clock starts, the faults count on
                prev = (0, us)
                continue
            name = HORSE_PHASES["claim"] if side == "plain" and mark == "function" else HORSE_PHASES.get(mark, mark)
            phases.append((name, at_faults - prev[0], us - prev[1]))
            prev = (at_faults, us)
        out[side] = {
            "phases": phases,
            "horse": prev,
            "cpu_ms": (cpu - idle_cpu) * 1000 / n,
            "faults": (faults - idle_faults) / n,
        }
    return out


def profile(engine, r, n: int, with_cprofile: bool) -> dict:
    """n no-op jobs per side in one in-process SimpleWorker (burst): wall time per job, Redis round trips
    (socket writes; a pipeline is one) and commands per job, and the ghostless steps' wall time."""
    from rq import Queue, SimpleWorker
    from rq.serializers import JSONSerializer

    from ghostless.execution.worker import build_worker

    for name, script in engine.scripts._scripts.items():  # a private map: it names the script calls
        _SHA_NAMES[script.sha] = _SHA_NAMES[script.function] = name
    out = {}
    for kind in ("ghostless", "plain", "ghostless", "plain"):  # the second pass is the one kept (warm)
        if kind == "ghostless":
            for i in range(n):
                engine.submit("noop", {"n": i}, owner="bench")
            worker = build_worker(engine, ["tput"], "simple")
        else:
            q = Queue(P_QUEUE, connection=r, serializer=JSONSerializer)
            q.enqueue_many([Queue.prepare_data("bench.plain_jobs.noop", args=(i,)) for i in range(n)])
            worker = SimpleWorker([P_QUEUE], connection=r, serializer=JSONSerializer)
        counter = TripCounter()
        steps = StepTimer(engine) if kind == "ghostless" else None
        prof = cProfile.Profile() if with_cprofile else None
        try:
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
            if prof:
                prof.disable()
            elapsed = time.perf_counter() - t0
        finally:
            counter.undo()
            if steps:
                steps.undo()
        text = ""
        if prof:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(30)
            text = buf.getvalue()
        out[kind] = {
            "per_job_ms": elapsed / n * 1000,
            "trips": counter.trips / n,
            "commands": {k: v / n for k, v in counter.commands.most_common()},
            "profile": text,
            "steps": {k: v / n * 1000 for k, v in steps.total.items()} if steps else {},
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=5000, help="jobs per side and worker class")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--classes", default="simple,fork")
    ap.add_argument("--horse-jobs", type=int, default=200, help="0: skip the work-horse phases")
    ap.add_argument("--profile-jobs", type=int, default=500, help="0: skip the in-process profile")
    ap.add_argument("--show-profile", action="store_true", help="print the cProfile tables")
    ap.add_argument(
        "--no-resolved",
        dest="resolved",
        action="store_false",
        help="skip the fork-class side of plain RQ workers with redis-py's DriverInfo resolved once",
    )
    a = ap.parse_args()
    print(machine())
    results = {}
    # AOF on (appendfsync everysec), as DESIGN.md asks of a ghostless Redis; both sides share it.
    with private_redis("--appendonly", "yes") as srv:
        os.environ["GHOSTLESS_REDIS_URL"] = srv.url
        os.environ["GHOSTLESS_BENCH_NS"] = NS
        from bench.app import engine

        r = srv.client()
        env = app_env(srv.url, NS, GHOSTLESS_BENCH_NS=NS)
        for cls in filter(None, a.classes.split(",")):
            kinds = ["ghostless", "plain"] + (["plain+resolved"] if cls == "fork" and a.resolved else [])
            sides = [Side(k, engine, r, srv.url, env) for k in kinds]
            print(
                f"{cls} workers x{a.workers}: {a.tasks} jobs per side in {a.rounds} interleaved rounds "
                f"({', '.join(kinds)})",
                flush=True,
            )
            results[cls] = compare(sides, cls, a.tasks, a.rounds, a.workers)
        horses = horse_phases(engine, r, srv.url, a.horse_jobs) if a.horse_jobs else None
        counts = engine.stats()["tput"]["counts"]
        prof = profile(engine, r, a.profile_jobs, a.show_profile) if a.profile_jobs else None
        problems = engine.check()

    print()
    print("== throughput: no-op jobs, drain rate of the workers ==")
    ok = True
    for cls, res in results.items():
        print(f"{cls} workers x{a.workers}:")
        for k, rate in res["rate"].items():
            line = f"  {k:17s} {rate:6.0f} jobs/s"
            rr = res["round_ratios"][k]
            spread = f"(per round {min(rr):.2f}..{max(rr):.2f}, median {statistics.median(rr):.2f})"
            if k == "ghostless":
                passed = res["ratio"][k] >= TARGET
                ok &= passed
                line += (
                    f"  ratio to plain RQ {res['ratio'][k]:.2f} {spread}  target >= {TARGET} "
                    f"{'PASS' if passed else 'FAIL'}"
                )
            elif k != "plain":
                ghostless = res["rate"]["ghostless"] / rate
                line += (
                    f"  {res['ratio'][k]:.2f} x plain RQ {spread}; ghostless = {ghostless:.2f} x this side "
                    "(diagnostic: plain RQ with the same redis-py fix)"
                )
            print(line)
        for k in res["rate"]:
            w, rs = res["cpu"][k]
            top = sorted(res["cmds"][k].items(), key=lambda kv: -kv[1])
            print(
                f"    {k:17s} CPU per job: workers {w:.2f} ms, redis-server {rs:.2f} ms; Redis commands "
                f"per job (server side, the bench's ZCARD polling left out) {sum(v for _, v in top):.1f}: "
                + ", ".join(f"{c} {v:.1f}" for c, v in top[:14])
            )
    print(f"ghostless task counts after the runs: { {k: v for k, v in counts.items() if v} }")
    if horses:
        print()
        print(
            f"== fork work-horses: one worker a side (burst), {a.horse_jobs} no-op jobs; pages copied "
            "(minor faults) and wall us, median per horse =="
        )
        for side, h in horses.items():
            faults, us = h["horse"]
            print(
                f"{side:9s}: a horse {faults:.0f} faults, {us / 1000:.2f} ms from RQ's main_work_horse to its exit; "
                f"the worker and its horses {h['cpu_ms']:.2f} ms CPU and {h['faults']:.0f} faults a job (an empty "
                "burst's start-up subtracted)"
            )
            for name, f, u in h["phases"]:
                print(f"    {name:42s} {f:5.0f} faults {u:6.0f} us")
    if prof:
        print()
        print(f"== worker side, in-process SimpleWorker (burst), {a.profile_jobs} no-op jobs ==")
        for kind, p in prof.items():
            print(
                f"{kind:9s}: {p['per_job_ms']:.2f} ms/job ({1000 / p['per_job_ms']:.0f} jobs/s single process), "
                f"{p['trips']:.1f} Redis round trips/job"
            )
            print(
                "           commands/job: " + ", ".join(f"{k} {v:.2f}" for k, v in p["commands"].items() if v >= 0.01)
            )
            if p["steps"]:
                print(
                    "           ghostless steps, wall ms/job: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in p["steps"].items())
                )
        if a.show_profile:
            for kind, p in prof.items():
                print(f"\n---- cProfile {kind} ----\n{p['profile']}")
    print(f"engine.check(): {problems or 'OK'}")
    return 0 if ok and not problems else 1


if __name__ == "__main__":
    run_main(main)
