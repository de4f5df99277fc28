"""Reading circuit breaker states (their changes happen inside the claim/complete/fail scripts)."""

from __future__ import annotations

from .text import text


def states(engine) -> list[dict]:
    """One row per (queue, upstream) with a breaker: state, open_until (s), recent calls and failures."""
    seen, rows = set(), []
    for tt in engine.registry:
        if not tt.breaker or (tt.queue, tt.breaker_name) in seen:
            continue
        seen.add((tt.queue, tt.breaker_name))
        h = {text(k): text(v) for k, v in engine.redis.hgetall(engine.keys.breaker(tt.queue, tt.breaker_name)).items()}
        calls = sum(int(v) for k, v in h.items() if k.startswith(("ok:", "fail:")))
        fails = sum(int(v) for k, v in h.items() if k.startswith("fail:"))
        rows.append(
            {
                "queue": tt.queue,
                "upstream": tt.breaker_name,
                "state": h.get("state", "closed"),
                "open_until": int(h["open_until"]) / 1000 if h.get("open_until", "0") != "0" else None,
                "calls": calls,
                "failures": fails,
                "policy": tt.breaker.policy,
            }
        )
    return rows
