"""Server instructions per lifecycle, counted by callgrind: a figure a noisy, shared machine cannot move.

    .venv/bin/python bench/instructions.py [--against REV] [--lifecycles 1000] [--realistic]

Runs a private redis-server (no persistence) under ``valgrind --tool=callgrind`` for each variant,
sends the same pipelined lifecycles (submit, claim, complete; ``--realistic`` adds two stages and a
progress report), and reads the instructions redis-server executed while they ran (callgrind's
counters zeroed after a warm-up of 200 lifecycles, ``--warm``, dumped after). Variants:

  functions          this checkout, its scripts as functions (FCALL): what a Redis 7 runs
  evalsha            the same scripts by EVALSHA: what Redis 6.2 and a cluster run
  REV                with ``--against``: git revision REV, its own engine sending its own scripts with
                     the keys and args it passes them, as functions (by EVALSHA for a revision from
                     before they were functions); a revision since ea1485e (its bench/_common.py)

Each variant's lifecycles are sent from a fresh interpreter that imports that variant's code.

Instructions are not time (a cache miss costs more than an add), but they are what the scripts ask
of the server, counted exactly the same way on every run: a change to the scripts shows as a
ratio side by side. bench/core.py gives the time (``server script us``), which this machine's load
stretches. About 2 minutes per variant (valgrind runs the server about 50 times slower).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench._common import REALISTIC_STEPS, machine, run_main
from tests.support.redis_server import free_port, redis_server_path
from tests.support.tether import tether

ROOT = Path(__file__).resolve().parent.parent


#: The lifecycles, sent from a fresh interpreter with the code of the variant (its engine builds the
#: keys and args its scripts take): warm-up, then "warm", then the counted ones on a line from stdin.
_DRIVE = """
import sys
sys.path[:0] = {paths!r}
import redis
from bench._common import ARGS, REALISTIC_STEPS, RESULT, Engine, pipelined_lifecycles, quiet_engine_logs
with quiet_engine_logs():
    engine = Engine(redis.Redis(port={port}), namespace="cg", dispatcher=None)

@engine.task(name="job", lease=60, timeout=600, stages={{"render": 300, "upload": 300}})
def job(ctx, prompt):
    return None

if {by_evalsha}:
    for call in engine.scripts._scripts.values():  # private: how the scripts are sent
        call.fcall = False
steps = REALISTIC_STEPS if {realistic} else ()
pipelined_lifecycles(engine, "job", ARGS, RESULT, {warm}, 100, steps=steps)
print("warm", flush=True)
sys.stdin.readline()
pipelined_lifecycles(engine, "job", ARGS, RESULT, {n}, 100, steps=steps)
print("done", flush=True)
"""


def tree_at(rev: str, into: Path) -> list[str]:
    """git revision ``rev`` extracted under ``into``, laid out as an install (its engine and lua as the
    ``ghostless`` package) beside its bench and tests: the import paths that run its own code."""
    tree, pkg = into / "tree", into / "pkg" / "ghostless"
    tree.mkdir()
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "engine", "lua", "bench", "tests"], stdout=out, check=True
        )
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    shutil.copytree(tree / "engine", pkg)  # the layout pyproject.toml's package-dir gives when installed
    shutil.copytree(tree / "lua", pkg / "lua")
    return [str(pkg.parent), str(tree)]


def count(paths: list[str], by_evalsha: bool, n: int, warm: int, realistic: bool, workdir: Path) -> int:
    """redis-server instructions while ``n`` lifecycles run with the code at import ``paths``."""
    port, out = free_port(), workdir / f"callgrind.{time.monotonic_ns()}"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", redis_server_path(),
         "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=tether(),
    )  # fmt: skip
    client = redis.Redis(port=port)
    driver = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        code = _DRIVE.format(paths=paths, port=port, by_evalsha=by_evalsha, realistic=realistic, warm=warm, n=n)
        driver = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=tether()
        )
        for expected, control in (("warm", "--zero"), ("done", "--dump")):
            line = driver.stdout.readline().strip()
            if line != expected:
                raise RuntimeError(f"the lifecycle driver stopped before {expected!r} (exit {driver.wait(60)})")
            subprocess.run(["callgrind_control", control, str(server.pid)], check=True, capture_output=True)
            if expected == "warm":
                driver.stdin.write("go\n")
                driver.stdin.flush()
        dumps = [p for p in workdir.glob(f"{out.name}.*") if re.fullmatch(r"\d+", p.suffix[1:])]
        text = max(dumps, key=lambda p: int(p.suffix[1:])).read_text(errors="replace")
        return int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
    finally:
        if driver is not None:
            driver.kill()
            driver.wait(60)
        try:
            client.shutdown(nosave=True)
        except redis.RedisError:
            pass
        server.wait(60)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="a git revision whose scripts to count beside this checkout's")
    ap.add_argument("--lifecycles", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=200, help="lifecycles before the count (the stream fills)")
    ap.add_argument("--realistic", action="store_true", help="two stages and a progress report per lifecycle")
    args = ap.parse_args(argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control") and redis_server_path()):
        print("instructions bench: needs valgrind (callgrind) and redis-server")
        return 2
    steps = REALISTIC_STEPS if args.realistic else ()
    print(machine())
    print(
        f"instructions bench: {args.lifecycles:,} pipelined lifecycles per variant after {args.warm} of warm-up "
        f"({'realistic: ' + ', '.join(s[0] for s in steps) if steps else 'submit, claim, complete'}); "
        "redis-server instructions counted by callgrind"
    )
    with tempfile.TemporaryDirectory(prefix="gl-instructions-") as tmp:
        work = Path(tmp)
        here = [str(ROOT)]
        variants = [("functions", here, False), ("evalsha", here, True)]
        if args.against:
            variants.append((args.against, tree_at(args.against, work), False))
        got = {}
        for label, paths, by_evalsha in variants:
            total = count(paths, by_evalsha, args.lifecycles, args.warm, args.realistic, work)
            got[label] = total / args.lifecycles
            print(f"  {label:<12} {got[label]:>12,.0f} instructions per lifecycle")
    base = got["functions"]
    print(
        "instructions: functions / evalsha "
        + f"{base / got['evalsha']:.3f}"
        + (f" | this checkout / {args.against} {base / got[args.against]:.3f}" if args.against else "")
    )
    return 0


if __name__ == "__main__":
    run_main(main)
