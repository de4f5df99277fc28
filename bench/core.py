"""Core benchmark: full task lifecycles (submit + claim + complete) against a private redis-server.

Phases, interleaved for ROUNDS rounds on the same connection (medians reported):
  trivial-1      EVALSHA "return 1", one call after another
  lifecycle-1    Engine.submit + Engine.claim + Engine.complete, one call after another
  trivial-P      EVALSHA "return 1", pipelines of BATCH
  lifecycle-P    pipelines of BATCH submits, then BATCH claims, then BATCH completes (bench/_common
                 LOCAL SHIM builds the argv Engine builds; checked against Engine at start-up)
  fat-1 / fat-P  diagnostic: EVALSHA "return 1" with a submit's keys and args (argument volume)
  lifecycle-P-noAOF  diagnostic: lifecycle-P on a second private redis-server without AOF
  lifecycle-1-evalsha / lifecycle-P-evalsha  diagnostic: the same lifecycles with every script sent by
                 EVALSHA (as on Redis 6.2 or a cluster) instead of as a function (FCALL), same server
Each phase: wall time, client CPU (this process), server script usec (INFO commandstats after
CONFIG RESETSTAT) and redis-server process CPU (INFO cpu).
The main server runs with AOF, appendfsync everysec: the persistence ghostless recommends.

Targets: lifecycle rate >= 0.8 x (trivial EVALSHA rate / 3), unpipelined and pipelined;
         server script time per lifecycle <= 100 us pipelined, <= 150 us one call at a time (issue 15).
The engine runs without an executor (dispatcher=None): a lifecycle is exactly three script calls.

Run: .venv/bin/python bench/core.py  (30 s on an idle 2-core machine, about a minute under load)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    AOF_EVERYSEC,
    ARGS,
    RESULT,
    Engine,
    Timer,
    claim_call,
    complete_call,
    inner_stats,
    lease_of,
    machine,
    median,
    parse,
    persistence,
    pipelined_lifecycles,
    private_redis,
    quiet_engine_logs,
    reset_stats,
    run_main,
    script_stats,
    server_cpu,
    submit_call,
    verdict,
    verify_shim,
)
from ghostless.core.lua_source import call_keys, library, source

ROUNDS = 7
BATCH = 100
N_TRIVIAL_1, N_LIFE_1 = 3000, 600
N_TRIVIAL_P, N_LIFE_P = 30000, 2000
TYPE = "bench_job"
RATIO_TARGET = 0.8
#: Server script time per lifecycle (issue 15): pipelined, one call at a time
SERVER_US_TARGET_P, SERVER_US_TARGET_1 = 100.0, 150.0


def measure(r, label: str, n: int, fn) -> dict:
    """Run fn() (which does n units of work) with stats reset before; return its figures."""
    reset_stats(r)
    cpu0 = server_cpu(r)
    with Timer() as t:
        fn()
    calls, usec = script_stats(r)
    return {
        "label": label,
        "n": n,
        "rate": n / t.wall,
        "client_us": t.cpu / n * 1e6,
        "script_us": usec / n,
        "calls": calls / n,
        "server_cpu_us": (server_cpu(r) - cpu0) / n * 1e6,
    }


def main() -> int:
    print(machine())
    size = {name: len(json.dumps(v, separators=(",", ":"))) for name, v in (("args", ARGS), ("result", RESULT))}
    print(
        f"core bench: {ROUNDS} interleaved rounds; batch {BATCH}; args {size['args']} B of JSON, "
        f"result {size['result']} B; engine without executor (dispatcher=None)"
    )
    with private_redis(*AOF_EVERYSEC) as server, private_redis() as plain_server:
        r, r_plain = server.client(), plain_server.client()
        print(
            f"private redis-server: {persistence(r)} (the persistence ghostless recommends); a second one with "
            f"{persistence(r_plain)} for the diagnostic phase lifecycle-P-noAOF"
        )
        engine = Engine(r, namespace="bench", dispatcher=None)
        by_evalsha = Engine(r, namespace="bench_evalsha", dispatcher=None)
        for call in by_evalsha.scripts._scripts.values():  # private: what a server without functions gets
            call.fcall = False
        with quiet_engine_logs():
            plain = Engine(r_plain, namespace="bench", dispatcher=None)
        for e in (engine, plain, by_evalsha):

            @e.task(name=TYPE, queue="core", lease=60, timeout=600)
            def bench_job(ctx, prompt):  # pragma: no cover - never run
                return None

        verify_shim(engine, TYPE, ARGS, RESULT)
        print(
            "shim: the script calls the LOCAL SHIM captures from Engine.submit/claim/complete match what they "
            "send (verified)"
        )

        trivial = r.register_script("return 1")
        trivial()  # loaded before any timing
        # Same argument volume as a submit: its keys, the 4 config values and its argv.
        _, _, fat_keys, fat_argv = submit_call(engine, TYPE, ARGS, owner="bench")
        fat_args = [*engine.config.script_argv(), *fat_argv]
        print(f"fat EVALSHA: {len(fat_keys)} keys and {len(fat_args)} args, as a submit sends")
        fat = r.register_script("return 1")

        def trivial_1(n):
            for _ in range(n):
                trivial()

        def trivial_p(n, keys=(), args=()):
            for start in range(0, n, BATCH):
                pipe = r.pipeline(transaction=False)
                for _ in range(min(BATCH, n - start)):
                    trivial(keys=keys, args=args, client=pipe)
                pipe.execute()

        def fat_1(n):
            for _ in range(n):
                fat(keys=fat_keys, args=fat_args)

        def lifecycle_1(n, e=engine):
            for _ in range(n):
                task = e.submit(TYPE, ARGS, owner="bench")
                lease = e.claim(task.id, "w1")
                e.complete(lease, RESULT)

        # warm-up (not timed): fill the event stream towards its cap, page everything in
        for e in (engine, plain, by_evalsha):
            pipelined_lifecycles(e, TYPE, ARGS, RESULT, 3000, BATCH)
        lifecycle_1(200)
        lifecycle_1(200, by_evalsha)
        trivial_p(5000)

        rounds = []
        for i in range(ROUNDS):
            got = {}
            for label, n, fn in [
                ("trivial-1", N_TRIVIAL_1, lambda: trivial_1(N_TRIVIAL_1)),
                ("lifecycle-1", N_LIFE_1, lambda: lifecycle_1(N_LIFE_1)),
                ("trivial-P", N_TRIVIAL_P, lambda: trivial_p(N_TRIVIAL_P)),
                ("lifecycle-P", N_LIFE_P, lambda: pipelined_lifecycles(engine, TYPE, ARGS, RESULT, N_LIFE_P, BATCH)),
                ("fat-1", N_TRIVIAL_1, lambda: fat_1(N_TRIVIAL_1)),
                ("fat-P", N_TRIVIAL_P, lambda: trivial_p(N_TRIVIAL_P, fat_keys, fat_args)),
                (
                    "lifecycle-P-noAOF",
                    N_LIFE_P,
                    lambda: pipelined_lifecycles(plain, TYPE, ARGS, RESULT, N_LIFE_P, BATCH),
                ),
                ("lifecycle-1-evalsha", N_LIFE_1, lambda: lifecycle_1(N_LIFE_1, by_evalsha)),
                (
                    "lifecycle-P-evalsha",
                    N_LIFE_P,
                    lambda: pipelined_lifecycles(by_evalsha, TYPE, ARGS, RESULT, N_LIFE_P, BATCH),
                ),
            ]:
                got[label] = measure(r_plain if label.endswith("noAOF") else r, label, n, fn)
            rounds.append(got)
            print(
                f"round {i + 1}: "
                + " | ".join(f"{k} {v['rate']:,.0f}/s srv {v['script_us']:.1f}us" for k, v in got.items())
            )

        med = {
            label: {
                k: median([rd[label][k] for rd in rounds])
                for k in ("rate", "client_us", "script_us", "calls", "server_cpu_us")
            }
            for label in rounds[0]
        }
        for label in med:
            med[label]["script_us_min"] = min(rd[label]["script_us"] for rd in rounds)
        ratio_1 = median([rd["lifecycle-1"]["rate"] / (rd["trivial-1"]["rate"] / 3) for rd in rounds])
        ratio_p = median([rd["lifecycle-P"]["rate"] / (rd["trivial-P"]["rate"] / 3) for rd in rounds])
        fat_ratio_1 = median([rd["lifecycle-1"]["rate"] / (rd["fat-1"]["rate"] / 3) for rd in rounds])
        fat_ratio_p = median([rd["lifecycle-P"]["rate"] / (rd["fat-P"]["rate"] / 3) for rd in rounds])

        print("\nmedians over rounds (per unit: a call for trivial/fat, a full lifecycle for lifecycle):")
        print(
            f"  {'phase':<18} {'rate':>10} {'script calls':>13} {'server script us':>17} {'(min)':>7} "
            f"{'server proc cpu us':>19} {'client cpu us':>14}"
        )
        for label, m in med.items():
            print(
                f"  {label:<18} {m['rate']:>8,.0f}/s {m['calls']:>13.2f} {m['script_us']:>17.1f} "
                f"{m['script_us_min']:>7.1f} {m['server_cpu_us']:>19.1f} {m['client_us']:>14.1f}"
            )
        print(
            "  server script us: INFO commandstats usec of FCALL and EVALSHA (time inside the script, which a busy "
            "machine stretches); server proc cpu us: INFO cpu user+sys of redis-server (includes protocol I/O)"
        )
        print(
            f"  lifecycle / (fat EVALSHA / 3): unpipelined {fat_ratio_1:.2f}, pipelined {fat_ratio_p:.2f} "
            "(diagnostic: same argument volume, no script work)"
        )

        for mode, tl, ll in (("unpipelined", "trivial-1", "lifecycle-1"), ("pipelined", "trivial-P", "lifecycle-P")):
            need = 1e6 / (RATIO_TARGET * med[tl]["rate"] / 3)
            print(
                f"  {mode}: the ratio target allows {need:,.0f} us of wall time per lifecycle; measured per "
                f"lifecycle: {1e6 / med[ll]['rate']:,.0f} us wall = client CPU {med[ll]['client_us']:,.0f} us + "
                f"server script {med[ll]['script_us']:,.0f} us + waiting (one connection: these do not overlap)"
            )

        for mode, ll in (("unpipelined", "lifecycle-1"), ("pipelined", "lifecycle-P")):
            m = med[ll]
            print(
                f"  {mode}: noise-free estimate from CPU per lifecycle (client and server take turns): "
                f"1e6 / ({m['client_us']:.0f} + {m['server_cpu_us']:.0f} us) = "
                f"{1e6 / (m['client_us'] + m['server_cpu_us']):,.0f} lifecycles/s"
            )

        breakdown(r, engine)

        for mode in ("1", "P"):
            fn, ev = med[f"lifecycle-{mode}"]["script_us"], med[f"lifecycle-{mode}-evalsha"]["script_us"]
            print(
                f"  {'unpipelined' if mode == '1' else 'pipelined'}: server script us per lifecycle as functions "
                f"{fn:.1f}, by EVALSHA {ev:.1f}: {ev - fn:.1f} us saved ({fn / ev:.2f} x)"
            )

        srv_1, srv_p = med["lifecycle-1"]["script_us"], med["lifecycle-P"]["script_us"]
        srv_ok = srv_p <= SERVER_US_TARGET_P and srv_1 <= SERVER_US_TARGET_1
        ok = ratio_1 >= RATIO_TARGET and ratio_p >= RATIO_TARGET and srv_ok
        print(
            f"\ncore: lifecycle {med['lifecycle-1']['rate']:,.0f}/s unpipelined = {ratio_1:.2f} x "
            f"(evalsha {med['trivial-1']['rate']:,.0f}/s / 3) [target >= {RATIO_TARGET}] "
            f"{verdict(ratio_1 >= RATIO_TARGET)} | pipelined {med['lifecycle-P']['rate']:,.0f}/s = "
            f"{ratio_p:.2f} x (evalsha {med['trivial-P']['rate']:,.0f}/s / 3) [target >= {RATIO_TARGET}] "
            f"{verdict(ratio_p >= RATIO_TARGET)} | server {srv_p:.0f} us/lifecycle pipelined, "
            f"{srv_1:.0f} us unpipelined (min {med['lifecycle-P']['script_us_min']:.0f}/"
            f"{med['lifecycle-1']['script_us_min']:.0f}) [target <= {SERVER_US_TARGET_P:.0f} / "
            f"{SERVER_US_TARGET_1:.0f}] {verdict(srv_ok)} | {verdict(ok)}"
        )
    return 0


def breakdown(r, engine, n: int = 3000) -> None:
    """Diagnostic: server script usec of each script separately (pipelined), and the fixed cost
    every script call pays before its own code runs (generated preamble + lua/lib)."""
    ids, leases = [], []
    out, inner = {}, {}

    def run(name, make):
        pipe, queued = engine.scripts.pipeline(), 0
        for item in make:
            engine.scripts._call(*item, client=pipe)
            queued += 1
            if queued == BATCH:
                yield pipe.execute()
                queued = 0
        if queued:
            yield pipe.execute()

    def phase(name, make, on_reply=None):
        reset_stats(r)
        for replies in run(name, make):
            for rep in replies:
                rep = parse(rep)
                assert rep[0] == 0, rep
                if on_reply:
                    on_reply(rep)
        inner_calls, inner_us = inner_stats(r)
        out[name] = script_stats(r)[1] / n
        inner[name] = (inner_calls / n, inner_us / n)

    def submits():
        for _ in range(n):
            tid, name, keys, argv = submit_call(engine, TYPE, ARGS, owner="bench")
            ids.append(tid)
            yield name, keys, argv

    phase("submit", submits())
    claims = [claim_call(engine, tid, "w1") for tid in ids]
    phase(
        "claim",
        iter(claims),
        lambda rep: leases.append(lease_of(ids[len(leases)], "w1", rep, claims[len(leases)][2][1])),
    )
    phase("complete", (complete_call(engine, lease, RESULT) for lease in leases))

    keys = call_keys("claim", engine.keys.task(ids[0]))
    args = [*engine.config.script_argv(), *range(16)]
    prefix = source("claim").split("-- lua/claim.lua")[0]
    fname, lib = library("claim")
    head, _, tail = lib.partition("local function main()\n")
    returning = (
        head
        + "local function main()\nreturn 1\nend\nredis.register_function"
        + tail.split("redis.register_function", 1)[1]
    ).replace(fname, "gl_bench_claim_returns")
    r.function_load(returning, replace=True)
    for label, send in [
        ("EVALSHA of an empty script, same keys/args", ("EVALSHA", r.script_load("return 1"))),
        (
            "EVALSHA of the preamble + claim's lua/lib, then return",
            ("EVALSHA", r.script_load(prefix + "\ndo return 1 end")),
        ),
        ("FCALL of claim's library, binding its keys and args, then return", ("FCALL", "gl_bench_claim_returns")),
    ]:
        reset_stats(r)
        pipe = r.pipeline(transaction=False)
        for _ in range(n):
            pipe.execute_command(*send, len(keys), *keys, *args)
        pipe.execute()
        out[label] = script_stats(r)[1] / n
    print("server script us per call, pipelined (diagnostic): " + ", ".join(f"{k} {v:.1f}" for k, v in out.items()))
    print(
        "  of which redis.call() commands (their own commandstats usec; the rest is Lua and call overhead): "
        + ", ".join(f"{k} {c:.0f} commands {u:.1f} us" for k, (c, u) in inner.items())
    )


if __name__ == "__main__":
    run_main(main)
