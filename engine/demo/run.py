"""``make demo`` / ``ghostless demo``: everything running on one machine, on a private Redis.

Starts a private redis-server in a temp dir (or, when none is installed, an
embedded fakeredis TCP server), two fork workers and a sweeper, submits a batch
of simulated image generations, and shows them reach their outcomes.
``--once`` runs headless until every task is terminal and prints a summary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ghostless.execution.supervisor import die_with_parent

ROOT = Path(__file__).resolve().parent.parent.parent
APP = "ghostless.demo.tasks:engine"
PROMPTS = [
    "a cat in a hat",
    "a lighthouse at dawn",
    "a red bicycle",
    "forbidden: a logo",
    "a foggy forest",
    "a koi pond",
    "a city at night",
    "a paper boat",
    "a snowy cabin",
    "a robot reading",
    "a desert road",
    "a blue whale",
]


def _kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant (work-horses lead their own group)."""
    family, todo = [], [pid]
    while todo:
        parent = todo.pop()
        family.append(parent)
        for entry in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = entry.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                todo.append(int(entry.parent.name))
    for member in family:
        for kill in (os.killpg, os.kill):
            try:
                kill(member, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_redis(workdir: str):
    port = _free_port()
    # GHOSTLESS_DEMO_REDIS=fake forces the embedded server even where redis-server is installed.
    server = shutil.which("redis-server") if os.environ.get("GHOSTLESS_DEMO_REDIS") != "fake" else None
    if server:
        proc = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                workdir,
                "--save",
                "",
                "--appendonly",
                "yes",
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        kind = f"redis-server (pid {proc.pid}, data in {workdir})"
        return f"redis://127.0.0.1:{port}/0", kind, proc
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghostless.demo.fakeserver", str(port)], cwd=ROOT, preexec_fn=die_with_parent
    )
    return f"redis://127.0.0.1:{port}/0", "an embedded fakeredis server (in memory)", proc


def _wait_redis(url: str, timeout: float = 15) -> None:
    import redis

    from ghostless.core.connect import connect

    client = connect(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: Redis at {url} did not start") from None
            time.sleep(0.05)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ghostless demo", description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="run until every demo task is terminal, then exit")
    parser.add_argument("--tasks", type=int, default=len(PROMPTS), help="how many tasks to submit")
    parser.add_argument("--timeout", type=float, default=300, help="--once gives up after this many seconds")
    parser.add_argument("--port", type=int, default=8000, help="web port (a free one when taken)")
    args = parser.parse_args(argv)

    def stop(signum, frame):  # SIGTERM/SIGHUP stop the demo the way Ctrl-C does: children included
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    workdir = tempfile.mkdtemp(prefix="ghostless-demo-")
    procs: list[subprocess.Popen] = []
    try:
        url, kind, redis_proc = _start_redis(workdir)
        procs.append(redis_proc)
        _wait_redis(url)
        os.environ["GHOSTLESS_REDIS_URL"] = url
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        # Each child leads its own process group: stopping the demo kills the groups (gunicorn's
        # workers, work-horses), so nothing is left running.
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL} if args.once else {}
        quiet["start_new_session"] = True
        quiet["preexec_fn"] = die_with_parent  # a demo killed by SIGKILL leaves nothing running either
        cli = [sys.executable, "-m", "ghostless"]
        procs.append(subprocess.Popen(cli + ["sweeper", "--app", APP, "--interval", "0.5"], env=env, cwd=ROOT, **quiet))
        procs.append(  # two workers under one supervisor: demo-worker-1 and demo-worker-2
            subprocess.Popen(
                cli + ["worker", "--app", APP, "--concurrency", "2", "--name", "demo-worker", "--log-level", "WARNING"],
                env=env,
                cwd=ROOT,
                **quiet,
            )
        )
        from ghostless.demo.tasks import OUTAGE, SPEED, engine

        # The model is down for the first seconds: watch its breaker open, then close again.
        engine.redis.set(OUTAGE, 1, px=max(1, int(4000 * SPEED)))
        ids = []
        for i in range(args.tasks):
            prompt = PROMPTS[i % len(PROMPTS)]
            ids.append(
                engine.submit(
                    "generate_image", {"prompt": prompt, "crash": i == 1}, owner="demo", idempotency_key=f"demo-{i}"
                ).id
            )
        print(f"ghostless demo: Redis is {kind}; {len(ids)} tasks submitted to 2 workers and a sweeper.")
        if not args.once:
            procs.append(_start_web(engine, cli, env, quiet, args.port))
        return _watch(engine, ids, args.timeout if args.once else None)
    except KeyboardInterrupt:
        print("\nstopping the demo...")
        return 130
    finally:
        for p in reversed(procs):
            _kill_tree(p.pid)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(workdir, ignore_errors=True)


def _start_web(engine, cli, env, quiet, port: int) -> subprocess.Popen:
    """The web app on ``port`` (or a free one), a demo admin, and a one-click login link."""
    import secrets
    import socket
    import urllib.request

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            port = _free_port()
    env = dict(env, GHOSTLESS_SECRET_KEY=secrets.token_hex(32))
    proc = subprocess.Popen(
        cli + ["web", "--app", APP, "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=ROOT, **quiet
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    engine.users.add("demo", admin=True)
    code = engine.users.login_code("demo", ttl=3600)
    print(
        f"dashboard:  {base}/\n"
        f"log in:     {base}/login/{code}   (a page with a Log in button; once, within an hour)\n"
        f"Ctrl-C stops everything.",
        flush=True,
    )
    return proc


def _watch(engine, ids: list[str], timeout: float | None) -> int:
    start = time.monotonic()
    last = ""
    while True:
        tasks = [engine.get(i) for i in ids]
        line = "  ".join(f"{s}={n}" for s, n in _count(tasks).items())
        if line != last:
            print(f"[{time.monotonic() - start:6.1f}s] {line}", flush=True)
            last = line
        if timeout is not None and (all(t and t.terminal for t in tasks) or time.monotonic() - start > timeout):
            break
        time.sleep(0.25)
    return _summary(engine, tasks)


def _count(tasks) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tasks:
        key = t.status.value if t else "LOST"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def _breaker_openings(engine) -> int:
    from ghostless.core.streams import read_stream

    return sum(1 for ev in read_stream(engine, "images", "-") if ev["kind"] == "breaker" and ev.get("state") == "open")


def _summary(engine, tasks) -> int:
    stats = engine.stats().get("images", {})
    history = {t.id: engine.history(t.id) for t in tasks if t}
    retries = sum(1 for evs in history.values() for e in evs if e.to == "RETRY_WAITING" and e.verb != "park")
    parked = sum(1 for evs in history.values() for e in evs if e.verb == "park")
    crashes = sum(1 for evs in history.values() for e in evs if "worker_lost" in e.reason)
    lost = sum(1 for t in tasks if t is None)
    not_done = sum(1 for t in tasks if t and not t.terminal)
    rows = [(s, n) for s, n in _count(tasks).items()] + [
        ("retries", retries),
        ("recovered crashes", crashes),
        ("parked (breaker open)", parked),
        ("breaker opened", _breaker_openings(engine)),
        ("stale completions refused", stats.get("stale_rejections", 0)),
        ("lost", lost),
        ("not terminal", not_done),
    ]
    print("\nsummary")
    for name, n in rows:
        print(f"  {name:<28}{n:>5}")
    problems = engine.check()
    for p in problems:
        print("  invariant violated:", p)
    return 0 if not lost and not not_done and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
