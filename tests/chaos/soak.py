"""Chaos soak: many tasks through real fork workers while workers are killed and paused and Redis
restarts; then a checker compares the engine's records with what the task functions really did.

    .venv/bin/python -m tests.chaos.soak --tasks 10000        (``make chaos``)
    .venv/bin/python -m tests.chaos.soak --tasks 500 --seed 7

tests/chaos/test_soak.py runs the CI size (500 tasks) and asserts on the same report.

What happens (all against a private redis-server with appendonly yes, appendfsync always):

- A submitter thread submits ``--tasks`` tasks (``--rate`` per second) with idempotency keys, retrying
  a submit whose reply was lost (Redis restart), so the list of submitted ids is exact. Each task gets
  1-3 stages of random length and a mode: ok, transient failure (first 1-2 attempts raise),
  permanent failure, always failing, or overrunning its stage deadline (-> TIMEOUT). A share is
  cancelled by its owner at a random moment.
- ``--workers`` fork workers (``ghostless worker``) and ``--sweepers`` sweepers run throughout.
- Every ``--kill-every`` seconds (random in the range) one SIGKILL: of a work-horse (its parent lives
  and reports ``worker_lost``) or of a whole worker (parent, then horse), which is replaced by a new
  worker. Any worker or sweeper that dies on its own is replaced too, and counted.
- Every ``--pause-every`` seconds a busy worker (its horse only, or parent and horse) gets SIGSTOP for
  longer than the lease (lease + 0.5..1.5 s), then SIGCONT: its lease is reclaimed meanwhile, and the
  paused attempt must not be able to change the task when it wakes up (fencing).
- Once, when ``--restart-at`` of the tasks have ended, Redis is SIGKILLed and restarted from its AOF.
- At given shares of the submissions (``--snatch-at``) one RQ job is popped the way a worker pops it
  and dropped: a worker that died between dequeue and claim, made certain.
- Chaos stops ``--quiet`` seconds before the drain deadline (last submission + ``--drain-timeout``).

The checker (``check_run``) defines, per submitted task id:

- lost: its task hash is gone (retention is 7 days: nothing may have purged it).
- stuck: not terminal at the drain deadline (or when the run drained).
- completed twice: the task's history has more than one accepted completion (a transition
  PROCESSING -> SUCCESS). The history is capped (100 entries), so this is cross-checked globally:
  the queue's ``entered:SUCCESS`` counter must equal the number of SUCCESS tasks.
- phantom success: SUCCESS whose accepted token (``ended_token``) has no ``done`` line in the
  side-effect log, or whose stored result names another token: an outcome nobody produced.
- duplicate executions: executions beyond one per attempt, i.e. more than one ``start`` line for
  the same (task, fencing token). Each claim issues a new token, so this is "two runs of one claim".
- zombie executions (informative): executions that wrote a line after a newer attempt of the same task
  had started (a paused or cut-off attempt running on; fencing must make it harmless).
- completions refused (informative): ``done`` executions whose result was not the accepted one.
- stale rejections: the queue's ``stale_rejections`` counter (every refused lease-holder call), and
  the refused ``complete`` calls found in histories.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ghostless import Config, Engine, IllegalTransition, TaskNotFound  # noqa: E402
from ghostless.core.states import TERMINAL, State  # noqa: E402
from tests.chaos.app import register  # noqa: E402
from tests.support.procs import Proc, app_env, start_sweeper, start_worker  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

APP = "tests.chaos.app:worker_engine"
QUEUE = "chaos"
NON_TERMINAL = [s.value for s in State if s not in TERMINAL]
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


@dataclass
class SoakConfig:
    tasks: int = 500
    workers: int = 4
    sweepers: int = 2
    seed: int = 1
    rate: float = 15.0  # submissions per second
    lease: float = 2.0
    # Config.requeue_after, scaled down like the lease (default 300 s): how long a QUEUED task whose
    # RQ job was lost (claim refused as not current, horse killed before its claim, job popped by a
    # worker that died) waits before the sweeper dispatches it again.
    requeue_after: float = 10.0
    mean_step: float = 0.06  # mean seconds per stage (exponential, capped at 0.5)
    kill_every: tuple[float, float] = (2.0, 4.0)
    horse_share: float = 0.5  # of kills: the work-horse only (else the whole worker)
    pause_every: tuple[float, float] = (5.0, 9.0)
    pause_extra: tuple[float, float] = (0.5, 1.5)  # a pause lasts lease + this
    restart_at: float = 0.4  # share of tasks ended when Redis restarts (> 1: never)
    snatch_at: tuple = (0.2, 0.5, 0.7)  # shares of tasks submitted at which a job is dropped after dequeue
    cancel_share: float = 0.02
    drain_timeout: float = 120.0  # after the last submission
    quiet: float = 20.0  # chaos stops this long before the drain deadline
    verbose: bool = True


@dataclass
class Report:
    submitted: int = 0
    states: dict = field(default_factory=dict)
    lost: list = field(default_factory=list)
    stuck: list = field(default_factory=list)
    stuck_detail: dict = field(default_factory=dict)  # where each stuck task's executor job is
    completed_twice: list = field(default_factory=list)
    success_counter_excess: int = 0
    phantom_successes: list = field(default_factory=list)
    duplicate_executions: int = 0
    executions: int = 0
    zombie_executions: int = 0
    completions_refused: int = 0
    stale_rejections: int = 0
    stale_completes_in_history: int = 0
    redispatches: int = 0
    snatched: dict = field(default_factory=dict)  # task id -> final state, for jobs dropped after dequeue
    end_reasons: dict = field(default_factory=dict)
    drain_seconds: float | None = None
    last_end_ms: int = 0  # server time (ms) of the last task ending (finished_at)
    started_ms: int = 0  # server time (ms) of the start of the run
    drained: bool = False
    check: list = field(default_factory=list)
    chaos: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def problems(self) -> list[str]:
        """Violations: each must be empty/zero."""
        out = []
        if self.lost:
            out.append(f"lost {len(self.lost)}: {self.lost[:5]}")
        if self.stuck:
            out.append(f"stuck {len(self.stuck)}: {self.stuck[:5]}")
        if self.completed_twice or self.success_counter_excess:
            out.append(
                f"completed twice {len(self.completed_twice)}: {self.completed_twice[:5]} "
                f"(entered:SUCCESS exceeds SUCCESS by {self.success_counter_excess})"
            )
        if self.phantom_successes:
            out.append(f"phantom successes {len(self.phantom_successes)}: {self.phantom_successes[:5]}")
        if self.duplicate_executions:
            out.append(f"duplicate executions (same task and token) {self.duplicate_executions}")
        if self.check:
            out.append(f"engine.check(): {self.check[:5]}")
        return out

    def format(self) -> str:
        s = self.states
        lines = [
            f"submitted {self.submitted}: SUCCESS {s.get('SUCCESS', 0)}, FAILED {s.get('FAILED', 0)}, "
            f"TIMEOUT {s.get('TIMEOUT', 0)}, CANCELLED {s.get('CANCELLED', 0)}"
            + "".join(f", {k} {v}" for k, v in s.items() if k not in ("SUCCESS", "FAILED", "TIMEOUT", "CANCELLED")),
            f"lost {len(self.lost)} | completed twice {len(self.completed_twice)} "
            f"(SUCCESS counter excess {self.success_counter_excess}) | stuck {len(self.stuck)} | "
            f"phantom successes {len(self.phantom_successes)} | duplicate executions {self.duplicate_executions}",
            f"stuck tasks by where their job is: {self.stuck_detail or '-'}",
            f"executions {self.executions} | zombie executions (ran on after a newer attempt started) "
            f"{self.zombie_executions} | completed executions not accepted {self.completions_refused}",
            f"stale rejections (stats) {self.stale_rejections} | stale completes refused (histories) "
            f"{self.stale_completes_in_history} | sweeper re-dispatches of QUEUED tasks {self.redispatches}",
            f"how failed/timed-out tasks ended: {dict(sorted(self.end_reasons.items()))}",
            f"tasks whose RQ job was dropped between dequeue and claim -> state at the end: {self.snatched}",
            f"time to drain: {'%.1f s' % self.drain_seconds if self.drain_seconds is not None else 'NOT DRAINED'}"
            f" (last task ended {(self.last_end_ms - self.started_ms) / 1000:.1f} s after the start)",
            f"chaos: {self.chaos}",
            f"engine.check(): {self.check or 'OK'}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# -- the plan of each task ----------------------------------------------------------------------------
def make_plan(rng: random.Random, mean_step: float) -> tuple[str, dict]:
    stages = [s for s in ("prepare", "render", "upload") if rng.random() < 0.6] or ["render"]
    steps = [[s, round(min(0.5, rng.expovariate(1 / mean_step)), 3)] for s in stages]
    u = rng.random()
    if u < 0.78:
        return "soak", {"steps": steps, "mode": "ok"}
    if u < 0.90:
        return "soak", {"steps": steps, "mode": "transient", "fail_attempts": rng.choice([1, 2])}
    if u < 0.95:
        return "soak", {"steps": steps, "mode": "permanent"}
    if u < 0.99:
        return "soak", {"steps": steps, "mode": "always"}
    if "render" not in stages:
        steps.append(["render", 0.0])
    return "soak_short", {"steps": steps, "mode": "overrun"}


# -- the run ------------------------------------------------------------------------------------------
class Soak:
    def __init__(self, cfg: SoakConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.ns = f"chaos{uuid.uuid4().hex[:6]}"
        with tempfile.NamedTemporaryFile(prefix="ghostless-chaos-", suffix=".log", delete=False) as f:
            self.log_path = f.name  # the side-effect log (tests/chaos/app.py appends to it)
        self.server = RedisServer(appendonly=True, appendfsync="always")
        self.ids: list[str] = []
        self.ids_lock = threading.Lock()
        self.cancels: list[tuple[float, str]] = []  # (monotonic time, task id)
        self.submitting_done = threading.Event()
        self.last_submit_at: float | None = None
        self.workers: list[Proc] = []
        self.sweepers: list[Proc] = []
        self.paused: dict[int, tuple[float, list[int]]] = {}  # worker pid -> (resume at, pids stopped)
        self.killed: set[int] = set()
        self.all_procs: list[Proc] = []
        self.chaos = collections.Counter()
        self.died: list[str] = []
        self.snatched: list[str] = []  # task ids whose RQ job the driver dropped

    def say(self, msg: str) -> None:
        if self.cfg.verbose:
            print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -- processes --------------------------------------------------------------------------------
    def env(self) -> dict:
        return app_env(
            self.server.url,
            self.ns,
            self.cfg.lease,
            GHOSTLESS_CHAOS_NS=self.ns,
            GHOSTLESS_CHAOS_LOG=self.log_path,
            GHOSTLESS_CHAOS_LEASE=str(self.cfg.lease),
            GHOSTLESS_CHAOS_REQUEUE=str(self.cfg.requeue_after),
        )

    def new_worker(self) -> Proc:
        p = start_worker(self.env(), APP, "fork", name=f"w-{uuid.uuid4().hex[:8]}")
        self.workers.append(p)
        self.all_procs.append(p)
        return p

    def new_sweeper(self) -> Proc:
        p = start_sweeper(self.env(), APP, interval=0.5)
        self.sweepers.append(p)
        self.all_procs.append(p)
        return p

    # -- submitter thread -------------------------------------------------------------------------
    def submit_all(self, engine: Engine) -> None:
        rng = random.Random(self.cfg.seed + 1)
        start = time.monotonic()
        try:
            for i in range(self.cfg.tasks):
                type_name, args = make_plan(rng, self.cfg.mean_step)
                wait = start + i / self.cfg.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                task = self._submit(engine, type_name, args, f"soak-{i}")
                with self.ids_lock:
                    self.ids.append(task.id)
                    if rng.random() < self.cfg.cancel_share:
                        self.cancels.append((time.monotonic() + rng.uniform(0, 3), task.id))
        finally:
            self.last_submit_at = time.monotonic()
            self.submitting_done.set()

    def _submit(self, engine, type_name, args, key):
        for attempt in range(600):
            try:
                return engine.submit(type_name, args, owner="soak", idempotency_key=key)
            except REDIS_DOWN:
                self.chaos["submit retries (Redis down)"] += 1
                time.sleep(min(1.0, 0.05 * (attempt + 1)))
        raise RuntimeError(f"could not submit {key}: Redis unreachable for minutes")

    # -- chaos ------------------------------------------------------------------------------------
    def busy(self) -> list[tuple[Proc, int]]:
        out = []
        for w in self.workers:
            if w.alive() and w.pid not in self.paused:
                kids = w.children()
                if len(kids) == 1:
                    out.append((w, kids[0]))
        return out

    def kill_one(self) -> None:
        """SIGKILL a busy worker's horse, or the whole busy worker (replaced). Idle workers are left
        alone: killing them tests nothing but RQ's start-up."""
        busy = self.busy()
        if not busy:
            self.chaos["kills skipped (no busy worker)"] += 1
            return
        w, horse = self.rng.choice(busy)
        if self.rng.random() < self.cfg.horse_share:
            _signal(horse, signal.SIGKILL)
            self.chaos["horse SIGKILL"] += 1
            return
        self.killed.add(w.pid)
        _signal(w.pid, signal.SIGKILL)  # the parent first, so nobody reports the horse's death
        _signal(horse, signal.SIGKILL)
        w.popen.wait(10)
        self.workers.remove(w)
        self.new_worker()
        self.chaos["worker SIGKILL (+ replacement)"] += 1

    def snatch_one(self, client) -> bool:
        """A worker that took a job and died before its work-horse claimed the task, made certain:
        the driver dequeues one ghostless RQ job the way a worker does (RQ's dequeue_any over the
        worker's lists: LMOVE into RQ's intermediate list for one list, LPOP for several) and drops
        it. Real SIGKILLs land in that window too (a few per hundred kills), but not predictably.
        The engine must notice that such a job will never run (RQDispatcher.job_exists) and dispatch
        the task again after requeue_after; before that was fixed, these tasks stayed QUEUED."""
        from rq import Queue
        from rq.serializers import JSONSerializer

        from ghostless.execution import rq_dispatch

        # the RQ lists a ghostless worker pops, in its order (one per priority level, if the engine has them)
        names = (
            rq_dispatch.rq_queue_names(self.ns, QUEUE)
            if hasattr(rq_dispatch, "rq_queue_names")
            else [rq_dispatch.rq_queue_name(self.ns, QUEUE)]
        )
        queues = [Queue(n, connection=client, serializer=JSONSerializer) for n in names]
        got = Queue.dequeue_any(queues, None, connection=client, serializer=JSONSerializer)
        if got:
            self.snatched.append(got[0].args[0])
            self.chaos["RQ job dropped between dequeue and claim"] += 1
        return bool(got)

    def pause_one(self) -> None:
        busy = self.busy()
        if not busy:
            return
        w, horse = self.rng.choice(busy)
        pids = [horse] if self.rng.random() < 0.5 else [w.pid, horse]
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        seconds = self.cfg.lease + self.rng.uniform(*self.cfg.pause_extra)
        self.paused[w.pid] = (time.monotonic() + seconds, pids)
        self.chaos["SIGSTOP horse" if len(pids) == 1 else "SIGSTOP worker+horse"] += 1

    def resume_due(self, force: bool = False) -> None:
        now = time.monotonic()
        for wpid, (at, pids) in list(self.paused.items()):
            if force or now >= at:
                for pid in pids:
                    _signal(pid, signal.SIGCONT)
                del self.paused[wpid]

    def replace_dead(self) -> None:
        for group, make, what in (
            (self.workers, self.new_worker, "worker"),
            (self.sweepers, self.new_sweeper, "sweeper"),
        ):
            for p in list(group):
                if not p.alive() and p.pid not in self.killed:
                    group.remove(p)
                    tail = p.output().strip().splitlines()[-3:]
                    self.died.append(f"{what} {p.pid} exited {p.popen.returncode}: {' | '.join(tail)}")
                    self.chaos[f"{what} died on its own (+ replacement)"] += 1
                    make()

    def cancel_due(self, engine: Engine) -> None:
        now = time.monotonic()
        with self.ids_lock:
            due = [c for c in self.cancels if c[0] <= now]
            self.cancels = [c for c in self.cancels if c[0] > now]
        for _, tid in due:
            try:
                engine.cancel(tid, by="soak", reason="changed my mind")
                self.chaos["cancels accepted"] += 1
            except (IllegalTransition, TaskNotFound):
                self.chaos["cancels of ended tasks"] += 1
            except REDIS_DOWN:
                with self.ids_lock:
                    self.cancels.append((now + 0.5, tid))

    def restart_redis(self) -> None:
        t0 = time.monotonic()
        self.server.restart(kill=True)
        self.chaos["Redis SIGKILL + restart (AOF always)"] += 1
        self.chaos["Redis outage ms"] = int((time.monotonic() - t0) * 1000)
        self.say(f"Redis restarted ({self.chaos['Redis outage ms']} ms)")

    # -- main loop --------------------------------------------------------------------------------
    def run(self) -> Report:
        cfg = self.cfg
        self.server.start()
        client = redis.Redis(host="127.0.0.1", port=self.server.port, socket_timeout=5, socket_connect_timeout=2)
        engine = register(Engine(client, namespace=self.ns, config=Config(requeue_after=cfg.requeue_after)), cfg.lease)
        counts_key = engine.keys.queue_key(QUEUE, "counts")
        report = Report()
        try:
            for _ in range(cfg.sweepers):
                self.new_sweeper()
            for _ in range(cfg.workers):
                self.new_worker()
            t_start = time.monotonic()
            sec, usec = client.time()
            report.started_ms = int(sec) * 1000 + int(usec) // 1000
            submitter = threading.Thread(target=self.submit_all, args=(engine,), daemon=True)
            submitter.start()
            self.say(
                f"{cfg.tasks} tasks at {cfg.rate:g}/s, {cfg.workers} fork workers, {cfg.sweepers} sweepers, "
                f"lease {cfg.lease:g}s, seed {cfg.seed}, log {self.log_path}"
            )
            next_kill = t_start + self.rng.uniform(*cfg.kill_every)
            next_pause = t_start + self.rng.uniform(*cfg.pause_every)
            restarted = cfg.restart_at > 1
            snatches = sorted(cfg.snatch_at)
            next_report = t_start + 10
            drained_at = None
            while True:
                now = time.monotonic()
                deadline = (self.last_submit_at + cfg.drain_timeout) if self.submitting_done.is_set() else None
                chaos_on = deadline is None or now < deadline - cfg.quiet
                self.resume_due(force=not chaos_on)
                try:
                    counts = {k.decode(): int(v) for k, v in client.hgetall(counts_key).items()}
                except REDIS_DOWN:
                    time.sleep(0.1)
                    continue
                pending = sum(counts.get(s, 0) for s in NON_TERMINAL)
                ended = sum(counts.get(s.value, 0) for s in TERMINAL)
                if self.submitting_done.is_set() and pending == 0 and ended >= len(self.ids):
                    drained_at = now
                    break
                if deadline is not None and now >= deadline:
                    break
                if chaos_on:
                    if now >= next_kill:
                        self.kill_one()
                        next_kill = now + self.rng.uniform(*cfg.kill_every)
                    if now >= next_pause:
                        self.pause_one()
                        next_pause = now + self.rng.uniform(*cfg.pause_every)
                    if snatches and len(self.ids) >= snatches[0] * cfg.tasks:
                        try:
                            if self.snatch_one(client):  # else the queue was empty: try again soon
                                snatches.pop(0)
                        except REDIS_DOWN:
                            pass
                    if not restarted and ended >= cfg.restart_at * cfg.tasks:
                        restarted = True
                        self.restart_redis()
                        continue
                try:
                    self.cancel_due(engine)
                except REDIS_DOWN:
                    pass
                self.replace_dead()
                if now >= next_report:
                    next_report = now + 10
                    in_flight = {k: v for k, v in counts.items() if k in NON_TERMINAL and v}
                    self.say(
                        f"submitted {len(self.ids)}, ended {ended}, in flight {pending} {in_flight}; "
                        f"chaos {dict(self.chaos)}"
                    )
                time.sleep(0.05)
            report.drained = drained_at is not None
            report.drain_seconds = (drained_at - t_start) if drained_at else None
            self.resume_due(force=True)
            report.chaos = dict(self.chaos)
            # what the run left behind, read before the workers go (they are idle when drained)
            check_run(engine, list(self.ids), self.log_path, report)
            report.notes += self.died
            report.snatched = {tid: engine.get(tid).status.value for tid in self.snatched}
            self.say(("drained" if report.drained else "NOT drained") + f"; {len(report.problems())} problem(s)")
        finally:
            self.resume_due(force=True)
            for p in self.all_procs:
                horses = p.children() if p.alive() else []
                p.stop()
                for pid in horses:  # a work-horse is its own process group: Proc.stop misses it
                    _signal(pid, signal.SIGCONT)
                    _signal(pid, signal.SIGKILL)
            keep = bool(report.problems())
            for p in self.all_procs:
                p.log.close()
                if not keep:
                    _unlink(p.log.name)
            if keep:
                report.notes.append(
                    f"kept for inspection: side-effect log {self.log_path}, process logs "
                    f"{[p.log.name for p in self.all_procs][:8]}..."
                )
            else:
                _unlink(self.log_path)
            client.close()
            self.server.close()
        return report


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -- the checker ----------------------------------------------------------------------------------------
def read_log(path: str) -> dict[str, list[tuple]]:
    """task id -> [(event, token, attempt, pid, time)] in file order."""
    out: dict[str, list[tuple]] = collections.defaultdict(list)
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 6:
                    continue
                event, tid, token, attempt, pid, at = parts
                out[tid].append((event, int(token), int(attempt), int(pid), float(at)))
    except FileNotFoundError:
        pass
    return out


def check_run(engine: Engine, ids: list[str], log_path: str, report: Report) -> Report:
    """Fill ``report`` from the engine's records and the side-effect log (definitions: module doc)."""
    r = engine.redis
    log = read_log(log_path)
    report.submitted = len(ids)
    states: collections.Counter = collections.Counter()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        pipe = r.pipeline(transaction=False)
        for tid in chunk:
            k = engine.keys.task(tid)
            pipe.hgetall(k.task)
            pipe.lrange(k.history, 0, -1)
            pipe.get(k.result)
        replies = pipe.execute()
        for i, tid in enumerate(chunk):
            h = {a.decode(): b.decode() for a, b in replies[3 * i].items()}
            history = [json.loads(e) for e in replies[3 * i + 1]]
            result = json.loads(replies[3 * i + 2]) if replies[3 * i + 2] else None
            if not h:
                report.lost.append(tid)
                continue
            status = h["status"]
            states[status] += 1
            if status not in NON_TERMINAL and h.get("finished_at"):
                report.last_end_ms = max(report.last_end_ms, int(h["finished_at"]))
            if status in NON_TERMINAL:
                report.stuck.append(f"{tid}:{status}")
                why = _why_stuck(engine, tid, h)
                report.stuck_detail[why] = report.stuck_detail.get(why, 0) + 1
            if status in ("FAILED", "TIMEOUT"):
                why = h.get("error_kind", "") + (":" + h.get("reason", "").split(":")[0] if status == "TIMEOUT" else "")
                report.end_reasons[f"{status}/{why}"] = report.end_reasons.get(f"{status}/{why}", 0) + 1
            successes = [e for e in history if e.get("kind") == "transition" and e.get("to") == "SUCCESS"]
            if len(successes) > 1:
                report.completed_twice.append(tid)
            report.stale_completes_in_history += sum(
                1 for e in history if e.get("kind") == "stale" and e.get("verb") == "complete"
            )
            report.redispatches += sum(
                1 for e in history if e.get("verb") == "dispatch" and e.get("reason") == "redispatch"
            )
            _check_executions(tid, h, result, log.get(tid, []), report)
    report.states = dict(sorted(states.items()))
    q = engine.stats()[QUEUE]
    report.stale_rejections = q["stale_rejections"]
    report.success_counter_excess = q["entered"]["SUCCESS"] - q["counts"]["SUCCESS"]
    report.check = engine.check()
    return report


def _why_stuck(engine: Engine, tid: str, h: dict) -> str:
    """Where a stuck task's executor job is: still waiting in an RQ list (a backlog), or popped and
    never claimed (RQ's own status given), or gone."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from ghostless.execution import rq_dispatch

    status, dispatch_id = h.get("status", ""), h.get("dispatch_id", "")
    if status != "QUEUED" or not dispatch_id:
        return f"{status} (dispatch {dispatch_id or 'none'})"
    names = (
        rq_dispatch.rq_queue_names(engine.keys.ns, QUEUE)
        if hasattr(rq_dispatch, "rq_queue_names")
        else [rq_dispatch.rq_queue_name(engine.keys.ns, QUEUE)]
    )
    r = engine.redis
    for name in names:
        for key in (f"rq:queue:{name}", f"rq:queue:{name}:intermediate"):
            if r.lpos(key, dispatch_id) is not None:
                return "QUEUED, job waiting in an RQ list" + (" (intermediate)" if key.endswith("intermediate") else "")
    try:
        job_status = Job.fetch(dispatch_id, connection=r, serializer=JSONSerializer).get_status()
    except NoSuchJobError:
        return "QUEUED, job gone"
    return f"QUEUED, job popped but never claimed (RQ says {getattr(job_status, 'value', job_status)})"


def _check_executions(tid: str, h: dict, result, lines: list[tuple], report: Report) -> None:
    starts = collections.Counter(tok for ev, tok, *_ in lines if ev == "start")
    report.executions += sum(starts.values())
    report.duplicate_executions += sum(n - 1 for n in starts.values() if n > 1)
    done_tokens = {tok for ev, tok, *_ in lines if ev == "done"}
    accepted = int(h["ended_token"]) if h.get("status") == "SUCCESS" and h.get("ended_token") else None
    if h.get("status") == "SUCCESS" and (accepted not in done_tokens or not result or result.get("token") != accepted):
        report.phantom_successes.append(tid)
    report.completions_refused += len(done_tokens - ({accepted} if accepted is not None else set()))
    # zombie: a line of token t written after a token > t had started
    newest = 0
    zombies = set()
    for ev, tok, *_ in lines:
        if tok < newest:
            zombies.add(tok)
        if ev == "start":
            newest = max(newest, tok)
    report.zombie_executions += len(zombies)


def run_soak(cfg: SoakConfig | None = None) -> Report:
    return Soak(cfg or SoakConfig()).run()


def main(argv=None) -> int:
    d = SoakConfig()
    ap = argparse.ArgumentParser(description="ghostless chaos soak (see the module docstring)")
    ap.add_argument("--tasks", type=int, default=int(os.environ.get("CHAOS_TASKS", d.tasks)))
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--sweepers", type=int, default=d.sweepers)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--rate", type=float, default=d.rate, help="submissions per second")
    ap.add_argument("--lease", type=float, default=d.lease)
    ap.add_argument("--requeue-after", type=float, default=d.requeue_after)
    ap.add_argument("--mean-step", type=float, default=d.mean_step)
    ap.add_argument("--restart-at", type=float, default=d.restart_at)
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="seconds after the last submission (default: 120, or 300 from 2,000 tasks)",
    )
    ap.add_argument(
        "--snatch-at",
        default=",".join(str(x) for x in d.snatch_at),
        help="shares of submissions at which one RQ job is dropped between dequeue and claim ('' for none)",
    )
    a = ap.parse_args(argv)
    cfg = SoakConfig(
        tasks=a.tasks,
        workers=a.workers,
        sweepers=a.sweepers,
        seed=a.seed,
        rate=a.rate,
        lease=a.lease,
        requeue_after=a.requeue_after,
        mean_step=a.mean_step,
        restart_at=a.restart_at,
        snatch_at=tuple(float(x) for x in a.snatch_at.split(",") if x.strip()),
        drain_timeout=a.drain_timeout or (300.0 if a.tasks >= 2000 else d.drain_timeout),
    )
    report = run_soak(cfg)
    print(report.format())
    problems = report.problems()
    print("RESULT: " + ("PASS" if not problems else "FAIL\n  " + "\n  ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
