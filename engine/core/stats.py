"""Queue statistics read from the counters the scripts keep (no scan)."""

from __future__ import annotations

from .clock import server_ms
from .config import DURATION_BUCKETS
from .states import State
from .text import text

INF = float("inf")


def _d(h: dict) -> dict[str, int]:
    return {text(k): int(v) for k, v in h.items()}


def state_counts(counts: dict, raw: dict | None = None) -> dict[str, dict[str, int]]:
    """Per state: the tasks in it ("counts"), that entered it ("entered") and that left it ("left"),
    from a queue's counts hash (and its stats hash ``raw``, for the counters of before), each as
    HGETALL gives it or already decoded.

    The transition scripts count each move once, as ``<from>><to>`` (``>PENDING`` for a submit;
    lua/lib/record.lua change), so a move is one HINCRBY. A field named after a state holds what
    no move counts: what a purge took out of it (negative), and the count of a queue from before the
    move counters; ``entered:<STATE>`` and ``tis_n:<STATE>`` of the stats hash are those of before.
    """
    counts, raw = _d(counts), _d(raw or {})
    out = {
        "counts": {s.value: counts.get(s.value, 0) for s in State},
        "entered": {s.value: raw.get(f"entered:{s.value}", 0) for s in State},
        "left": {s.value: raw.get(f"tis_n:{s.value}", 0) for s in State},
    }
    for field, n in counts.items():
        source, sep, target = field.partition(">")
        if not sep:
            continue
        if target in out["counts"]:
            out["counts"][target] += n
            out["entered"][target] += n
        if source in out["counts"]:
            out["counts"][source] -= n
            out["left"][source] += n
    return out


def stats(engine) -> dict:
    """Per queue: counts per state, tasks that entered and that left each state, mean time in state (s),
    failures per error kind, mean time per stage (s), stale rejections, repeated calls."""
    queues = engine.queues()
    pipe = engine.redis.pipeline(transaction=False)
    for q in queues:
        pipe.hgetall(engine.keys.queue_key(q, "counts"))
        pipe.hgetall(engine.keys.queue_key(q, "stats"))
    replies = pipe.execute()
    out = {}
    for i, q in enumerate(queues):
        counts, raw = _d(replies[2 * i]), _d(replies[2 * i + 1])
        per_state = state_counts(counts, raw)
        out[q] = {
            "counts": per_state["counts"],
            "entered": per_state["entered"],
            "left": per_state["left"],  # the moves out of each state: time_in_state's counts
            "time_in_state": _means(_fields(raw, "tis_ms:"), per_state["left"]),
            "time_in_stage": _means(_fields(raw, "stage_ms:"), _fields(raw, "stage_n:")),
            "failures": {k[5:]: v for k, v in raw.items() if k.startswith("fail:")},
            "stale_rejections": raw.get("stale_rejections", 0),
            "overdue": raw.get("overdue", 0),
            "escalated": raw.get("escalated", 0),
            "parked": raw.get("parked", 0),
            "replayed": raw.get("replayed", 0),  # calls that repeated one already done (lib/record: replay)
        }
    return out


def _fields(raw: dict[str, int], prefix: str) -> dict[str, int]:
    """The fields of ``raw`` named ``<prefix><name>``, by name."""
    return {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}


def _means(totals: dict[str, int], counts: dict[str, int]) -> dict[str, float]:
    """Mean seconds per name: its total ms over its count."""
    out = {}
    for name, value in totals.items():
        n = counts.get(name, 0)
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
