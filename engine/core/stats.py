"""Queue statistics read from the counters the scripts keep (no scan)."""

from __future__ import annotations

from .states import State
from .text import text


def _d(h: dict) -> dict[str, int]:
    return {text(k): int(v) for k, v in h.items()}


def stats(engine) -> dict:
    """Per queue: counts per state, tasks that entered each state, mean time in state (s),
    failures per error kind, mean time per stage (s), stale rejections."""
    queues = engine.queues()
    pipe = engine.redis.pipeline(transaction=False)
    for q in queues:
        pipe.hgetall(engine.keys.queue_key(q, "counts"))
        pipe.hgetall(engine.keys.queue_key(q, "stats"))
    replies = pipe.execute()
    out = {}
    for i, q in enumerate(queues):
        counts, raw = _d(replies[2 * i]), _d(replies[2 * i + 1])
        out[q] = {
            "counts": {s.value: counts.get(s.value, 0) for s in State},
            "entered": {s.value: raw.get(f"entered:{s.value}", 0) for s in State},
            "time_in_state": _means(raw, "tis_ms:", "tis_n:"),
            "time_in_stage": _means(raw, "stage_ms:", "stage_n:"),
            "failures": {k[5:]: v for k, v in raw.items() if k.startswith("fail:")},
            "stale_rejections": raw.get("stale_rejections", 0),
            "overdue": raw.get("overdue", 0),
            "escalated": raw.get("escalated", 0),
            "parked": raw.get("parked", 0),
        }
    return out


def _means(raw: dict[str, int], total: str, count: str) -> dict[str, float]:
    out = {}
    for key, value in raw.items():
        if key.startswith(total):
            name = key[len(total) :]
            n = raw.get(count + name, 0)
            if n:
                out[name] = value / n / 1000
    return out
