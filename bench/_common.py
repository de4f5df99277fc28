"""Helpers shared by bench/core.py and bench/sweep.py.

- ``private_redis()``: a private redis-server (tests.support.redis_server), never the shared 6379.
- ``machine()``: nproc, CPU model and redis-server version, printed at the top of each bench.
- ``script_stats()`` / ``inner_stats()`` / ``server_cpu()`` / ``commands_processed()``: INFO
  commandstats (script usec; the usec of the commands scripts run), INFO cpu, INFO stats.
- ``Timer``: wall time and this process's CPU time of a block; ``RoundTrips``: redis-py socket writes.
- ``median`` / ``verdict`` / ``chunks``: small reporting helpers.
- ``ARGS`` / ``RESULT``: the payload of every bench task; ``rq_job``: the RQ job of the memory comparison.
- The LOCAL SHIM (``submit_call``, ``claim_call``, ``complete_call``): the script call that
  Engine.submit / Engine.claim / Engine.complete make, captured from the real methods, so a bench
  can pipeline those calls. Engine exposes no public helper for it; ``verify_shim()`` checks the
  captured calls against what the real methods send.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ghostless import Engine  # noqa: E402
from ghostless.core.ids import new_worker_name  # noqa: E402
from ghostless.core.lua_source import call_keys  # noqa: E402
from ghostless.core.models import Lease  # noqa: E402
from ghostless.core.replies import parse  # noqa: E402
from tests.support.redis_server import SERVER_ENV, RedisServer, redis_server_path  # noqa: E402
from tests.support.wait import server_ms, wait_for_server_time  # noqa: E402

# The payload of every bench task: ~114 B of args JSON, ~115 B of result JSON.
ARGS = {"prompt": "a" * 100}
RESULT = {"url": "https://example.invalid/" + "b" * 80}
# The persistence ghostless recommends (engine/core/server.py): AOF, fsync every second. Automatic AOF
# rewrites are off so that a background rewrite (a fork copying the dataset) never lands in a timing.
AOF_EVERYSEC = ("--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0")
SCRIPT_COMMANDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


# -- machine and server -----------------------------------------------------------------------------
def machine() -> str:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    version = subprocess.run([redis_server_path(), "--version"], capture_output=True, text=True).stdout.strip()
    return f"machine: nproc={os.cpu_count()} cpu={cpu!r} python={platform.python_version()}\nredis: {version}"


def use_valkey() -> None:
    """Make every private server of this process Valkey 8, a server of the Redis 7.2 line, which
    .ci/valkey fetches from Debian's archive (``make check-valkey`` runs the contract tests on it)."""
    got = subprocess.run([str(ROOT / ".ci" / "valkey")], capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"no Valkey server: {got.stderr.strip()}")
    os.environ[SERVER_ENV] = got.stdout.strip()


@contextlib.contextmanager
def quiet_engine_logs():
    """The engine's start-up warnings (AOF off on a bench's private server: known, on purpose)
    silenced while the block runs; the ``ghostless`` logger's level as it was afterwards (a bench
    run in-process, as tests/test_bench_smoke.py does, must not silence the rest of the process)."""
    quiet = logging.getLogger("ghostless")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


@contextlib.contextmanager
def private_redis(*extra: str):
    """A private redis-server (own port, own temp dir), stopped and removed on exit."""
    if redis_server_path() is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(*extra).start()
    try:
        yield server
    finally:
        server.close()


def persistence(client) -> str:
    info, fsync = client.info("persistence"), client.config_get("appendfsync")["appendfsync"]
    return f"appendonly {'yes' if int(info['aof_enabled']) else 'no'}, appendfsync {fsync}"


def script_stats(client) -> tuple[int, int]:
    """(calls, usec) of every script command since the last CONFIG RESETSTAT (INFO commandstats).

    The usec of EVAL/EVALSHA includes the redis.call()s the script makes (Redis also lists those
    under their own cmdstat_*; they are not added again here).
    """
    stats = client.info("commandstats")
    calls = usec = 0
    for cmd in SCRIPT_COMMANDS:
        s = stats.get(f"cmdstat_{cmd}")
        if s:
            calls += int(s["calls"])
            usec += int(s["usec"])
    return calls, usec


def inner_stats(client) -> tuple[int, int]:
    """(calls, usec) of the data commands run since the last CONFIG RESETSTAT, scripts' redis.call()s
    included: everything but script commands and the bench's own INFO/CONFIG/SCRIPT commands."""
    calls = usec = 0
    for name, s in client.info("commandstats").items():
        cmd = name[len("cmdstat_") :]
        if cmd in SCRIPT_COMMANDS or cmd.split("|")[0] in ("info", "config", "script"):
            continue
        calls += int(s["calls"])
        usec += int(s["usec"])
    return calls, usec


def server_cpu(client) -> float:
    """Seconds of CPU the redis-server process has used (user + sys, all threads)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def reset_stats(client) -> None:
    client.config_resetstat()


def commands_processed(client) -> int:
    """Commands the server has run (INFO stats total_commands_processed; scripts' redis.call()s count)."""
    return int(client.info("stats")["total_commands_processed"])


class Timer:
    """``with Timer() as t: ...`` then ``t.wall`` (s) and ``t.cpu`` (s of this process's CPU)."""

    def __enter__(self):
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


class RoundTrips:
    """Counts the writes redis-py makes to its sockets: the client's round trips. One per command;
    one per pipeline execute (redis-py's own pipeline sends SCRIPT EXISTS first when it holds
    scripts; the engine's, Scripts.pipeline, does not). Use as a context manager."""

    def __enter__(self):
        import redis.connection as rc

        self._cls, self.count = rc.AbstractConnection, 0
        self._orig = self._cls.send_packed_command

        def counted(conn, command, check_health=True):
            self.count += 1
            return self._orig(conn, command, check_health)

        self._cls.send_packed_command = counted
        return self

    def __exit__(self, *exc):
        self._cls.send_packed_command = self._orig


# -- reporting --------------------------------------------------------------------------------------
def median(values) -> float:
    return statistics.median(values)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def chunks(seq, size: int):
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


# ================================================================================================
# LOCAL SHIM -- NOT ENGINE API.
# Engine.submit / Engine.claim / Engine.complete build their script call inline and run it at once,
# so a caller cannot put them in a pipeline. Rather than duplicate their argv building (it changed
# three times in the hour these benches were written), the shim runs the real Engine method with
# engine.scripts._call swapped for a function that raises _Captured(name, keys, argv): the method
# validates and builds exactly what it would send, and stops there. The proposed replacement is a
# public Engine helper returning (script, keys, argv) per call; see the final report.
# verify_shim() checks the captured calls against what the real methods send when run.
# ================================================================================================
class _Captured(Exception):
    def __init__(self, name: str, keys: list, argv: list):
        super().__init__(name)
        self.call = (name, keys, argv)


def captured_call(engine: Engine, method, *args, **kwargs) -> tuple[str, list, list]:
    """SHIM: (script name, keys, argv) of the script call ``method`` (a bound Engine method) makes."""

    def grab(name, keys, argv, client=None, via=None, extra=()):
        raise _Captured(name, call_keys(name, keys, extra), list(argv))

    engine.scripts._call = grab
    try:
        method(*args, **kwargs)
    except _Captured as c:
        return c.call
    finally:
        del engine.scripts._call  # back to the bound method
    raise AssertionError(f"{method.__name__} made no script call")


def submit_call(engine: Engine, type_name: str, args: dict, *, owner: str, **kwargs):
    """SHIM of Engine.submit's script call: (task_id, name, keys, argv)."""
    name, keys, argv = captured_call(engine, engine.submit, type_name, args, owner=owner, **kwargs)
    task_id = argv[0]  # lua/submit.lua: ARGV[5] (the first after the 4 config values) is the task id
    assert keys[0] == engine.keys.task(task_id).task, (keys[0], task_id)
    return task_id, name, keys, argv


def claim_call(engine: Engine, task_id: str, worker: str, **kwargs):
    """SHIM of Engine.claim's script call: (name, keys, argv)."""
    return captured_call(engine, engine.claim, task_id, worker, **kwargs)


def complete_call(engine: Engine, lease: Lease, result=None):
    """SHIM of Engine.complete's script call: (name, keys, argv)."""
    return captured_call(engine, engine.complete, lease, result)


def lease_of(task_id: str, worker: str, reply: list, claim_id: str) -> Lease:
    """The Lease of a parsed claim reply, as Engine.claim makes it (lua/claim.lua's reply);
    ``claim_id``: the one the claim sent (its ARGV[6], ``claim_call(...)[2][1]``)."""
    return Lease(
        task_id=task_id,
        token=int(reply[1]),
        attempt=int(reply[2]),
        args=None,
        type=reply[4],
        worker=worker,
        lease=int(reply[5]) / 1000,
        max_attempts=int(reply[6]),
        claim_id=claim_id,
    )


def verify_shim(engine: Engine, type_name: str, args: dict, result) -> None:
    """Run the real Engine.submit/claim/complete once, recording the script calls they make, and
    check the shim captures the same (the claim id is random: compared without it)."""
    seen = []
    real_call = engine.scripts._call

    def record(name, keys, argv, client=None, via=None, extra=()):
        seen.append((name, call_keys(name, keys, extra), list(argv)))
        return real_call(name, keys, argv, client=client, via=via, extra=extra)

    engine.scripts._call = record
    try:
        task = engine.submit(type_name, args, owner="bench")
        lease = engine.claim(task.id, "w1")
        engine.complete(lease, result)
    finally:
        del engine.scripts._call
    assert [s[0] for s in seen] == ["submit", "claim", "complete"], [s[0] for s in seen]
    submitted = submit_call(engine, type_name, args, owner="bench")
    _, name, keys, argv = submitted
    same_but_id = [x.replace(submitted[0], task.id) if isinstance(x, str) else x for x in [*keys, *argv]]
    assert (name, same_but_id) == (seen[0][0], [*seen[0][1], *seen[0][2]]), f"submit shim: {submitted} {seen[0]}"
    name, keys, argv = claim_call(engine, task.id, "w1")
    assert (name, keys, len(argv)) == (seen[1][0], seen[1][1], len(seen[1][2])), f"claim shim: {argv} {seen[1]}"
    assert [x for i, x in enumerate(argv) if i != 1] == [x for i, x in enumerate(seen[1][2]) if i != 1]
    assert complete_call(engine, lease, result) == seen[2], f"complete shim: {seen[2]}"


def pipelined_claims(engine: Engine, type_name: str, args: dict, owners: list[str], worker: str = "w1") -> list[Lease]:
    """One task per owner, submitted in one pipeline, then claimed in another: their leases."""
    pipe = engine.scripts.pipeline()
    ids = []
    for owner in owners:
        tid, name, keys, argv = submit_call(engine, type_name, args, owner=owner)
        engine.scripts._call(name, keys, argv, client=pipe)
        ids.append(tid)
    _expect_ok(pipe.execute(), "submit")
    pipe = engine.scripts.pipeline()
    claims = [claim_call(engine, tid, worker) for tid in ids]
    for call in claims:
        engine.scripts._call(*call, client=pipe)
    replies = _expect_ok(pipe.execute(), "claim")
    return [lease_of(tid, worker, r, c[2][1]) for tid, r, c in zip(ids, replies, claims)]


#: A worker name as ghostless workers get by default (engine/core/ids.py: 16 hex digits; RQ's own
#: default, ``uuid4().hex``, has 32): a task stores its worker's name in its hash, in its attempt's
#: claim entry and in the stream entries of its attempt. The memory figure uses it; the time benches keep "w1".
DEFAULT_WORKER_NAME = new_worker_name()

#: The working part of the realistic lifecycle (issue 15's memory figure): two stages, one progress
#: report; the task type must declare both stages.
REALISTIC_STEPS = (("stage", "render"), ("progress", 0.5, "half"), ("stage", "upload"))


def pipelined_lifecycles(
    engine: Engine,
    type_name: str,
    args: dict,
    result,
    n: int,
    batch: int = 100,
    worker: str = "w1",
    steps=(),
    owners: int = 1,
) -> list[str]:
    """n full lifecycles in batches: one pipeline of `batch` submits, then claims, then one per
    step (``("stage", name)`` or ``("progress", fraction, message)``, Engine.stage/progress), then
    completes. The tasks are owner "bench"'s, or with ``owners`` > 1 spread over "user0", "user1", ..."""
    ids = []
    for start in range(0, n, batch):
        who = ["bench" if owners == 1 else f"user{i % owners}" for i in range(start, start + min(batch, n - start))]
        leases = pipelined_claims(engine, type_name, args, who, worker)
        for verb, *step in steps:
            pipe = engine.scripts.pipeline()
            for lease in leases:
                engine.scripts._call(*captured_call(engine, getattr(engine, verb), lease, *step), client=pipe)
            _expect_ok(pipe.execute(), verb)
        pipe = engine.scripts.pipeline()
        for lease in leases:
            engine.scripts._call(*complete_call(engine, lease, result), client=pipe)
        _expect_ok(pipe.execute(), "complete")
        ids.extend(lease.task_id for lease in leases)
    return ids


def rq_job(prompt):
    """The RQ job of bench/sweep.py's memory comparison: a result the size of RESULT."""
    return dict(RESULT)


def _expect_ok(replies, what: str) -> list:
    parsed = [parse(r) for r in replies]
    bad = [r for r in parsed if r[0] != 0]
    if bad:
        raise AssertionError(f"{what}: {len(bad)} refused, e.g. {bad[0]!r}")
    return parsed


__all__ = [
    "AOF_EVERYSEC",
    "ARGS",
    "DEFAULT_WORKER_NAME",
    "REALISTIC_STEPS",
    "RESULT",
    "ROOT",
    "Engine",
    "Lease",
    "RoundTrips",
    "Timer",
    "captured_call",
    "chunks",
    "claim_call",
    "commands_processed",
    "complete_call",
    "inner_stats",
    "lease_of",
    "machine",
    "median",
    "parse",
    "persistence",
    "pipelined_claims",
    "pipelined_lifecycles",
    "private_redis",
    "reset_stats",
    "rq_job",
    "script_stats",
    "server_cpu",
    "server_ms",
    "submit_call",
    "verdict",
    "verify_shim",
    "wait_for_server_time",
]


def stop(proc) -> None:
    """Kill a worker (tests.support.procs.Proc) and its work-horse, and remove its log."""
    proc.stop()
    proc.log.close()
    with contextlib.suppress(OSError):
        os.unlink(proc.log.name)


def run_main(main, *args) -> None:
    """Run a benchmark's ``main(*args)`` and exit with what it returns. A SIGTERM (a timeout, a
    cancelled job) ends it as Ctrl-C does, through its ``finally`` blocks, which stop the workers
    and servers it started: each runs in a session of its own (tests/support/procs.py), which a
    signal to this process or its group does not reach, and would outlive it."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main(*args))
