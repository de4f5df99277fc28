"""``make bench``: run every benchmark under bench/ and write docs/benchmarks.md.

Each benchmark measures ghostless beside its baseline (a trivial EVALSHA, plain RQ, flask-sse) in
the same run and prints its figures with their targets; this collects their output as is, with the
machine, the load average and a reading of its speed (python_speed) as each began, when and how long
each took. ``make bench ARGS=sse.py`` runs one and replaces only its section of docs/benchmarks.md
(``ARGS="'watchers.py --resume'"``: one that takes arguments, named with them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import ROOT
from tests.support.tether import tether

BENCHES = [  # (script, what it measures)
    ("core.py", "full lifecycles vs a trivial EVALSHA; server CPU per lifecycle"),
    ("instructions.py", "redis-server instructions per lifecycle (callgrind): functions vs EVALSHA"),
    (
        "instructions.py --realistic",
        "the same with two stages and a progress report per lifecycle: the calls a lease holder makes as it works",
    ),
    ("sweep.py", "sweeper tick with 1M tasks; reclaim rate; memory per task vs an RQ job"),
    ("sweep.py --memory --valkey", "memory per task vs an RQ job on Valkey 8, a server of the Redis 7.2 line"),
    ("recovery.py", "time from SIGKILL to another worker entering the task, vs plain RQ"),
    ("throughput.py", "no-op tasks through ghostless on RQ vs plain RQ jobs"),
    ("sse.py", "SSE broadcast latency, memory per subscriber, Redis connections vs flask-sse"),
    ("durable.py", "what wait_replicas=1 costs per lifecycle: a primary and its replica, WAIT vs no WAIT"),
    ("aio.py", "AsyncEngine.submit and get beside the Engine's; the RQ dispatch in a worker thread"),
    ("watchers.py", "N task pages opened at once on the default `ghostless web`, then 1,000 progress events/s"),
    (
        "watchers.py --resume",
        "the same pages reconnecting at once with Last-Event-ID, as after a web restart, each having missed one event",
    ),
    ("cluster.py", "6 queues on a 3-shard Redis Cluster vs one redis-server; a master SIGKILLed under load"),
]


def main(argv: list[str]) -> int:
    only = set(argv)
    doc_path = ROOT / "docs" / "benchmarks.md"
    kept = _sections(doc_path.read_text()) if doc_path.exists() else {}
    # A run of some keeps every section where it was; a run of all writes BENCHES' in their order,
    # then the others the document held (dated ones written by hand: a run beside another revision).
    sections = dict(kept) if only else {}
    failed = []
    for script, what in BENCHES:
        if only and script not in only:
            continue
        load, speed = os.getloadavg()[0], python_speed()
        start = time.monotonic()
        print(f"== bench/{script}: {what}", flush=True)
        name, *args = script.split()
        returncode, stdout, stderr = _run([sys.executable, str(ROOT / "bench" / name), *args])
        took = time.monotonic() - start
        output = (stdout + ("\n" + stderr if returncode else "")).strip()
        print(output, flush=True)
        if returncode:
            failed.append(script)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        sections[f"bench/{script}"] = (
            f"## bench/{script}\n\n{what}. Run {stamp}; took {took:.0f} s; load average {load:.1f} and a "
            f"1M-addition Python loop {speed:.0f} ms at the start"
            f"{'; exit code ' + str(returncode) if returncode else ''} (a missed target exits 1)."
            f"\n\n```\n{output}\n```\n"
        )
    doc = (
        "# Benchmarks\n\nWritten by `make bench`. Every figure is measured beside its baseline in the same "
        "run on this project's 2-core machine, which is shared and noisy: ratios and CPU per operation are "
        "steadier than rates. Each section names the machine it ran on and when (runs of one benchmark "
        "replace only its own section).\n\n"
        + "\n".join([*sections.values(), *(text for name, text in kept.items() if name not in sections)])
    )
    doc_path.write_text(doc)
    print(f"wrote docs/benchmarks.md{' (failed: ' + ', '.join(failed) + ')' if failed else ''}")
    return 1 if failed else 0


def _run(args: list[str], timeout: float = 1800, grace: float = 60) -> tuple[int, str, str]:
    """Run a benchmark: (exit code, stdout, stderr). Past ``timeout`` it is sent SIGTERM, on which
    it stops the processes it started (bench/_common.py run_main), then SIGKILL after ``grace``."""
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=tether(signal.SIGTERM)
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        stderr += f"\n(stopped after {timeout:.0f} s)"
    return proc.returncode, stdout, stderr


def python_speed() -> float:
    """Milliseconds a fixed Python loop (1M additions) takes now, best of 3: how fast this shared
    machine runs at the moment, so runs of different hours compare (2026-12-05: 73 to 113 ms within
    ten minutes)."""
    best = float("inf")
    for _ in range(3):
        start, total = time.perf_counter(), 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - start)
    return best * 1000


def _sections(doc: str) -> dict[str, str]:
    """The sections of an existing docs/benchmarks.md by heading (``bench/<script>`` for a
    benchmark's, any other for one written by hand): each ``## `` line outside a code block starts
    one. ValueError for two sections of one heading (a run would keep only one of them)."""
    out: dict[str, str] = {}
    heading, lines, fenced = None, [], False

    def close() -> None:
        if heading is None:  # the header, before the first section
            return
        if heading in out:
            raise ValueError(f"docs/benchmarks.md: two sections headed {heading!r}")
        out[heading] = "\n".join(lines).rstrip("\n") + "\n"

    for line in doc.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("## ") and not fenced:
            close()
            heading, lines = line[3:].strip(), []
        lines.append(line)
    close()
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
