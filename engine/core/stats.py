"""Queue statistics read from the counters the scripts keep (no scan)."""

from __future__ import annotations

from .clock import server_ms
from .config import DURATION_BUCKETS
from .states import State
from .text import text

INF = float("inf")


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


def waiting_ages(engine, queues: list[str]) -> dict[str, dict[str, float]]:
    """Per queue, how long its oldest PENDING and oldest QUEUED task have waited for a worker
    (seconds, Redis time; 0 when none waits): the head of each wait line (lib/record: wait_lines),
    one ZRANGE 0 0 each, so the read costs O(log N) whatever the backlog."""
    now = server_ms(engine.redis)
    pipe = engine.redis.pipeline(transaction=False)
    lines = (("PENDING", "pending_since"), ("QUEUED", "queued_since"))
    for q in queues:
        for _, line in lines:
            pipe.zrange(engine.keys.queue_key(q, line), 0, 0, withscores=True)
    heads = pipe.execute()
    out: dict[str, dict[str, float]] = {}
    for i, q in enumerate(queues):
        for j, (state, _) in enumerate(lines):
            head = heads[i * len(lines) + j]
            out.setdefault(q, {})[state] = max(0.0, (now - head[0][1]) / 1000) if head else 0.0
    return out


#: The stats-hash field of each histogram's total (ms): the run histogram's is PROCESSING's
#: time-in-state total, which lib/record.lua adds for the same durations anyway.
HISTOGRAM_TOTALS = {"wait": "wait_ms", "run": "tis_ms:PROCESSING"}


def histogram(raw: dict[str, int], name: str) -> tuple[list[tuple[float, int]], float, int]:
    """The histogram ``name`` ('wait' or 'run') of a queue's stats hash as Prometheus wants it:
    (cumulative counts per upper bound in seconds, +Inf last; the sum in seconds; the count).
    A bucket counter whose bound is no longer in DURATION_BUCKETS counts in the next bound up."""
    per: dict[float, int] = dict.fromkeys([*map(float, DURATION_BUCKETS), INF], 0)
    prefix = f"{name}_h:"
    for key, n in raw.items():
        if key.startswith(prefix):
            field = key[len(prefix) :]
            le = INF if field == "inf" else int(field) / 1000
            per[min(b for b in per if b >= le)] += n
    cumulative: list[tuple[float, int]] = []
    total = 0
    for upper, n in per.items():
        total += n
        cumulative.append((upper, total))
    return cumulative, raw.get(HISTOGRAM_TOTALS[name], 0) / 1000, total
