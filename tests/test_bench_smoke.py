"""The benchmarks still run against the current engine (tiny sizes: a smoke test, no figures).

A behaviour change can break a benchmark's set-up (a claim refused where it used to work) and
`make bench` would only find out much later; these run each in-process in a few seconds.
"""

import logging
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.conftest import REQUIRE_REAL, need_redis_cli, need_redis_server
from tests.support.procs import ROOT, running

pytestmark = pytest.mark.slow


def test_the_core_benchmark_runs(monkeypatch, capsys):
    need_redis_server()
    from bench import core

    for name, value in {"ROUNDS": 1, "N_TRIVIAL_1": 30, "N_LIFE_1": 10, "N_TRIVIAL_P": 200, "N_LIFE_P": 100}.items():
        monkeypatch.setattr(core, name, value)
    assert core.main() == 0
    assert "core: lifecycle" in capsys.readouterr().out


def test_the_instructions_benchmark_runs(capsys):
    need_redis_server()
    if not shutil.which("valgrind"):
        pytest.skip("valgrind (callgrind) is not installed: bench/instructions.py counts with it")
    from bench import instructions

    assert instructions.main(["--lifecycles", "10", "--warm", "10", "--against", "HEAD"]) == 0
    out = capsys.readouterr().out
    assert "instructions: functions / evalsha" in out and "this checkout / HEAD" in out


def test_the_sweep_benchmark_runs(monkeypatch, capsys):
    need_redis_server()
    from bench import sweep

    for name, value in {
        "BIG": 300,
        "BIG_SPLIT": {"PENDING": 200, "PROCESSING": 50, "SUCCESS": 50},
        "TICKS": 3,
        "RECLAIM": 200,
        "RECLAIM_VARIANT": 20,
        "RECLAIM_RQ": 10,
        "MEM_TASKS": 250,
    }.items():
        monkeypatch.setattr(sweep, name, value)
    assert sweep.main([]) == 0
    out = capsys.readouterr().out
    assert "sweep tick:" in out and "sweep reclaim:" in out and "memory:" in out


def test_the_memory_benchmark_runs_alone_on_valkey(monkeypatch, capsys):
    """``sweep.py --memory --valkey``: part (c) on Valkey 8, which .ci/valkey fetches (the autouse
    environment fixture drops the server choice it makes afterwards)."""
    need_redis_server()
    from bench import sweep

    monkeypatch.setattr(sweep, "MEM_TASKS", 100)
    try:
        assert sweep.main(["--memory", "--valkey"]) == 0
    except SystemExit as no_valkey:
        if REQUIRE_REAL:
            raise
        pytest.skip(f"SKIPPED LOUDLY: {no_valkey}")
    out = capsys.readouterr().out
    assert "Valkey server v=" in out and "memory:" in out and "sweep tick:" not in out
    with pytest.raises(SystemExit, match="unknown arguments"):
        sweep.main(["--memroy"])


def test_the_promotion_lateness_benchmark_runs(monkeypatch, capsys):
    need_redis_server()
    from bench import lateness

    monkeypatch.setattr("sys.argv", ["lateness.py", "--trials", "2"])
    for name in ("GHOSTLESS_REDIS_URL", "GHOSTLESS_BENCH_NS"):  # main sets them: restored afterwards
        monkeypatch.setenv(name, "")
    assert lateness.main() == 0
    assert "promotion lateness of short retries" in capsys.readouterr().out


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resuming"])
def test_the_watchers_benchmark_runs(capsys, resume):
    need_redis_server()
    from bench import watchers

    assert watchers.main(["--quick", *(["--resume"] if resume else [])]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("default "))
    n, opened = (int(x) for x in row.split()[1:3])
    delivered, expected = (int(x) for x in row.split()[5].split("/"))
    assert n == 20 and opened > 0, row  # the default server serves some pages, whatever its caps
    assert 0 < delivered <= expected, row  # progress events reached the open pages, each at most once
    assert "errors by kind:" in out
    if resume:  # each open page replayed the event it missed (or got a snapshot): opened counts both
        assert re.search(r"one missed event each: (\d+) replayed it, (\d+) got a snapshot", out), out


def test_the_broadcast_benchmark_runs(monkeypatch, capsys):
    need_redis_server()
    from bench import sse

    monkeypatch.setenv("GHOSTLESS_REDIS_URL", "")  # run_level sets it: restored afterwards
    assert sse.main(["--levels", "10", "--servers", "ghostless-gevent,ghostless-default", "--events", "5"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("ghostless-")]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("ghostless-gevent", "10", "50/50"),
        ("ghostless-default", "10", "50/50"),
    ]


def test_the_aio_benchmark_runs(monkeypatch, capsys):
    need_redis_server()
    from bench import aio

    monkeypatch.setattr(aio, "ROUNDS", 1)
    monkeypatch.setattr(aio, "N", 20)
    level = logging.getLogger("ghostless").level
    assert aio.main() in (0, 1)  # tiny sizes: the figures say nothing, the run must work
    assert logging.getLogger("ghostless").level == level  # the rest of the process still logs
    assert "aio: async/sync per submit" in capsys.readouterr().out


def test_the_cluster_benchmark_runs(capsys):
    need_redis_cli()
    from bench import cluster

    assert cluster.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "| cluster |" in out and "| standalone |" in out
    row = next(line for line in out.splitlines() if line.startswith("| wait_replicas=0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "1"  # the one kill of the smoke size, measured
    assert cells[-1] == "0"  # no task completed twice across the failover


def test_the_watchers_benchmark_closes_a_generator_that_exits_meanwhile():
    # Each generator's reader thread reaps it (Popen.wait) when it exits after "stop": between
    # close()'s poll and its kill the process group can be gone, which must not fail a run.
    from bench import watchers

    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    p.wait()
    p.poll = lambda: None  # as close() saw it: not yet reaped
    gens = watchers.Generators.__new__(watchers.Generators)
    gens.procs = [p]
    gens.close()


def test_the_work_horse_probe_runs():
    need_redis_server()
    from bench import throughput
    from bench._common import private_redis
    from ghostless import Engine

    with private_redis() as server:
        engine = Engine(server.client(), namespace=throughput.NS)
        engine.task("noop", queue="tput", timeout=60, max_attempts=1)(lambda ctx, n=0: None)
        horses = throughput.horse_phases(engine, server.client(), server.url, 10)
    phases = {side: [name for name, _, _ in h["phases"]] for side, h in horses.items()}
    assert "ghostless: claim" in phases["ghostless"] and "ghostless: complete" in phases["ghostless"]
    rq_start = ["RQ's start of the job, to its first command", "the horse's connection to Redis"]
    assert phases["ghostless"][1:4] == [*rq_start, "RQ's start of the job, the rest"]  # one connection a horse
    assert phases["plain"] == [
        "fork -> RQ's perform_job",
        *rq_start,
        "RQ's start of the job, the rest",
        "the task function (a no-op)",
        "RQ's end of the job",
        "to the horse's exit",
    ]
    assert all(faults >= 0 for h in horses.values() for _, faults, _ in h["phases"])


def bench_checkout(tmp_path, monkeypatch, doc: str, scripts=("tiny",)):
    """A checkout in ``tmp_path`` for bench/run_all.py: the scripts (each printing '<name>: 1 x'),
    benches tiny.py and other.py, and docs/benchmarks.md holding ``doc``; returns (run_all, the doc)."""
    from bench import run_all

    (tmp_path / "bench").mkdir()
    (tmp_path / "docs").mkdir()
    for name in scripts:
        (tmp_path / "bench" / f"{name}.py").write_text(f"print('{name}: 1 x')\n")
    path = tmp_path / "docs" / "benchmarks.md"
    path.write_text(doc)
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    monkeypatch.setattr(run_all, "BENCHES", [("tiny.py", "a tiny one"), ("other.py", "another")])
    return run_all, path


def test_a_run_of_one_benchmark_keeps_the_other_sections_of_the_document(tmp_path, monkeypatch):
    run_all, doc = bench_checkout(
        tmp_path,
        monkeypatch,
        "# Benchmarks\n\n## bench/tiny.py\n\nold run\n\n## bench/tiny.py, beside a7a48d4\n\nby hand\n\n"
        "## bench/other.py\n\nits run\n",
    )
    assert run_all.main(["tiny.py"]) == 0
    text = doc.read_text()
    assert "tiny: 1 x" in text and "old run" not in text
    assert text.index("## bench/tiny.py\n") < text.index("by hand") < text.index("its run")


def test_a_run_of_all_benchmarks_keeps_the_sections_written_by_hand_after_its_own(tmp_path, monkeypatch):
    run_all, doc = bench_checkout(
        tmp_path,
        monkeypatch,
        "# Benchmarks\n\n## bench/tiny.py, beside a7a48d4\n\nby hand\n\n## bench/other.py\n\nold\n",
        scripts=("tiny", "other"),
    )
    assert run_all.main([]) == 0
    text = doc.read_text()
    assert text.index("tiny: 1 x") < text.index("other: 1 x") < text.index("by hand") and "old" not in text


def test_a_run_of_one_benchmark_keeps_a_section_under_any_heading_and_names_no_machine_in_the_header(
    tmp_path, monkeypatch
):
    run_all, doc = bench_checkout(
        tmp_path,
        monkeypatch,
        "# Benchmarks\n\nWritten by `make bench`.\n\n```\nmachine: some earlier run's host\n```\n\n"
        "## bench/tiny.py\n\nold run\n\n## A comparison written by hand\n\n```\n## not a heading\n```\n\n"
        "## bench/other.py\n\nits run\n",
    )
    assert run_all.main(["tiny.py"]) == 0
    text = doc.read_text()
    assert "machine:" not in text.split("## ", 1)[0]  # each section names its own host
    assert "tiny: 1 x" in text and "old run" not in text
    assert text.index("tiny: 1 x") < text.index("## A comparison written by hand\n\n```\n## not a heading\n```")
    assert text.index("## not a heading") < text.index("its run")


def test_two_sections_of_one_heading_are_refused_before_anything_runs(tmp_path, monkeypatch):
    run_all, doc = bench_checkout(tmp_path, monkeypatch, "# Benchmarks\n\n## by hand\n\na\n\n## by hand\n\nb\n")
    with pytest.raises(ValueError, match="two sections headed 'by hand'"):
        run_all.main(["tiny.py"])
    assert doc.read_text().endswith("## by hand\n\nb\n")  # left as it was


BENCH_WITH_A_WORKER = """
import subprocess, sys, time
sys.path.insert(0, {root!r})
from bench._common import run_main

def main():
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        print(worker.pid, flush=True)  # in the try: a SIGTERM as soon as it is read still stops the worker
        time.sleep(600)
    finally:
        worker.kill()
        worker.wait()
    return 0

run_main(main)
"""


@pytest.fixture
def bench_with_a_worker(tmp_path):
    """A benchmark script that starts a worker in a session of its own, prints its pid and waits;
    (its path, the pids read), any worker still running SIGKILLed afterwards."""
    script = tmp_path / "bench_with_a_worker.py"
    script.write_text(BENCH_WITH_A_WORKER.format(root=str(ROOT)))
    workers: list[int] = []
    yield script, workers
    for pid in workers:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_benchmark_sent_sigterm_stops_the_processes_it_started(bench_with_a_worker):
    """As a timeout or a cancelled job does: the worker, in a session of its own, is not left behind."""
    script, workers = bench_with_a_worker
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) as bench:
        workers.append(int(bench.stdout.readline()))
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(10) == 128 + signal.SIGTERM
    assert not running(workers[0])


def test_make_bench_stops_a_benchmark_past_its_timeout_so_that_it_stops_what_it_started(bench_with_a_worker):
    from bench import run_all

    script, workers = bench_with_a_worker
    returncode, stdout, stderr = run_all._run([sys.executable, str(script)], timeout=2, grace=10)
    workers.append(int(stdout.split()[0]))
    assert returncode == 128 + signal.SIGTERM and "stopped after 2 s" in stderr
    assert not running(workers[0])
