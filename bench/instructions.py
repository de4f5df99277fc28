"""Server instructions per lifecycle, counted by callgrind: a figure a noisy, shared machine cannot move.

    .venv/bin/python bench/instructions.py [--against REV] [--lifecycles 1000] [--realistic]

Runs a private redis-server (no persistence) under ``valgrind --tool=callgrind`` for each variant,
sends the same pipelined lifecycles (submit, claim, complete; ``--realistic`` adds two stages and a
progress report), and reads the instructions redis-server executed while they ran (callgrind's
counters zeroed after a warm-up of 200 lifecycles, ``--warm``, dumped after). Variants:

  functions          this checkout's scripts, as functions (FCALL): what a Redis 7 runs
  evalsha            the same scripts by EVALSHA: what Redis 6.2 and a cluster run
  REV                with ``--against``: the scripts of git revision REV as its own code builds them,
                     as functions (by EVALSHA for a revision from before they were functions)

Instructions are not time (a cache miss costs more than an add), but they are what the scripts ask
of the server, counted exactly the same way on every run: a change to the scripts shows as a
ratio side by side. bench/core.py gives the time (``server script us``), which this machine's load
stretches. About 2 minutes per variant (valgrind runs the server about 50 times slower).
"""

from __future__ import annotations

import argparse
import json
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

from bench._common import ARGS, REALISTIC_STEPS, RESULT, Engine, machine, pipelined_lifecycles, quiet_engine_logs
from ghostless.core import lua_source
from tests.support.redis_server import free_port, redis_server_path

ROOT = Path(__file__).resolve().parent.parent


def scripts_here() -> dict:
    """(function name, library text) and EVALSHA text of every script of this checkout, by name."""
    return {n: (lua_source.library(n), lua_source.source(n)) for n in lua_source.SCRIPTS}


#: Run in a fresh interpreter on an extracted tree: the texts its own lua_source.py builds.
_DUMP = """
import json, sys
from ghostless.core import lua_source as ls
lib = getattr(ls, "library", None)  # None: a revision from before the scripts were functions
print(json.dumps({n: [list(lib(n)) if lib else None, ls.source(n)] for n in ls.SCRIPTS}))
"""


def scripts_at(rev: str, into: Path) -> dict:
    """The scripts of git revision ``rev`` as its own code builds them: (function name, library text)
    (None before the scripts were functions) and EVALSHA text, by name."""
    tree, pkg = into / "tree", into / "pkg" / "ghostless"
    tree.mkdir()
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "engine", "lua"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    shutil.copytree(tree / "engine", pkg)  # the layout pyproject.toml's package-dir gives when installed
    shutil.copytree(tree / "lua", pkg / "lua")
    dumped = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(pkg.parent)!r})\n{_DUMP}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {n: (tuple(lib) if lib else None, text) for n, (lib, text) in json.loads(dumped.stdout).items()}


def count(scripts, by_evalsha: bool, n: int, warm: int, steps, workdir: Path) -> int:
    """redis-server instructions while ``n`` lifecycles run with ``scripts``."""
    port, out = free_port(), workdir / f"callgrind.{time.monotonic_ns()}"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", redis_server_path(),
         "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
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
        with quiet_engine_logs():
            engine = Engine(client, namespace="cg", dispatcher=None)

        @engine.task(name="job", lease=60, timeout=600, stages={"render": 300, "upload": 300})
        def job(ctx, prompt):  # pragma: no cover - never run
            return None

        for name, call in engine.scripts._scripts.items():  # private: the scripts under test
            lib, text = scripts[name]
            if lib:
                call.function, call.library = lib
            call.script = client.register_script(text)
            call.fcall = lib is not None and not by_evalsha
        pipelined_lifecycles(engine, "job", ARGS, RESULT, warm, 100, steps=steps)
        subprocess.run(["callgrind_control", "--zero", str(server.pid)], check=True, capture_output=True)
        pipelined_lifecycles(engine, "job", ARGS, RESULT, n, 100, steps=steps)
        subprocess.run(["callgrind_control", "--dump", str(server.pid)], check=True, capture_output=True)
        dumps = [p for p in workdir.glob(f"{out.name}.*") if re.fullmatch(r"\d+", p.suffix[1:])]
        text = max(dumps, key=lambda p: int(p.suffix[1:])).read_text(errors="replace")
        return int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
    finally:
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
        here = scripts_here()
        variants = [("functions", here, False), ("evalsha", here, True)]
        if args.against:
            variants.append((args.against, scripts_at(args.against, work), False))
        got = {}
        for label, scripts, by_evalsha in variants:
            got[label] = count(scripts, by_evalsha, args.lifecycles, args.warm, steps, work) / args.lifecycles
            print(f"  {label:<12} {got[label]:>12,.0f} instructions per lifecycle")
    base = got["functions"]
    print(
        "instructions: functions / evalsha "
        + f"{base / got['evalsha']:.3f}"
        + (f" | this checkout / {args.against} {base / got[args.against]:.3f}" if args.against else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
