"""``GET /metrics``: Prometheus metrics read from the engine's counters at scrape time.

A custom collector (no background thread, no state in the web process): each scrape reads
``engine.stats()``, ``engine.breakers()``, ``engine.rate_limits()`` and ``engine.draining()`` plus one pipelined read of
the time-in-state totals, so every web process answers with the same numbers and gunicorn's
worker count does not matter. A scrape while Redis is down is a 503 (Prometheus records the
target as down).

Families (all labelled by ``queue``):

- ``ghostless_tasks{state}``: tasks in each state now (gauge).
- ``ghostless_transitions_total{state}``: tasks that entered each state (counter).
- ``ghostless_failures_total{error_kind}``: failed attempts per error kind (counter).
- ``ghostless_stale_rejections_total``, ``ghostless_overdue_total``, ``ghostless_escalated_total``,
  ``ghostless_parked_total``: refused stale calls and what the sweeper recorded (counters);
  ``ghostless_replayed_total``: calls that repeated one already done (counter).
- ``ghostless_time_in_state_seconds{state}`` and ``ghostless_time_in_stage_seconds{stage}``:
  summaries (``_sum``/``_count``, no quantiles) of the time tasks spent in a state (stage)
  before leaving it. A mean-seconds gauge would be a lifetime mean that stops moving after a
  day; from sum and count, ``rate(..._sum[5m]) / rate(..._count[5m])`` is the mean over any window.
- ``ghostless_breaker_state{upstream}``: 0 closed, 1 half-open, 2 open (gauge).
- Rate limits (engine/core/rates.py), per ``{upstream}``: ``ghostless_rate_limit`` (starts
  allowed per window) and ``ghostless_rate_limit_window_seconds``, ``ghostless_rate_limit_used``
  (starts in the current window) and ``ghostless_rate_limit_available`` (gauges),
  ``ghostless_rate_limit_waiting`` (tasks parked by the limit now, gauge) and
  ``ghostless_rate_limit_parked_total`` (parks so far, counter).
- ``ghostless_queue_draining``: 1 while a queue is draining (gauge).
- ``ghostless_redis_data_lost`` (no labels): 1 once this web process has seen Redis lose its data
  (the data epoch marker vanished or changed, engine/core/epoch.py), until it is restarted (gauge).
- Sweeper tick ages, the oldest waiting task per queue and state, live workers per queue, and the
  queue wait and run time histograms: web/ops_metrics.py.

Access: operators scrape without a user token, and the numbers name queues, task types and
error kinds, so /metrics is closed by default. It answers to ``Authorization: Bearer
$GHOSTLESS_METRICS_TOKEN`` (the scraper's own secret), to an admin user's token or session,
or to anyone when ``GHOSTLESS_METRICS_PUBLIC=1`` (a private network, a sidecar). Otherwise:
401 (no or wrong credentials) or 403 (a user who is not an admin).
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from ghostless.core.states import State
from ghostless.core.text import text

from .auth import UNAUTHORIZED, current_user
from .deps import get_engine
from .errors import ApiError
from .ops_metrics import ops_families

bp = Blueprint("metrics", __name__)
BREAKER_VALUES = {"closed": 0, "half_open": 1, "open": 2}
COUNTERS = (
    ("stale_rejections", "Calls refused because their fencing token was stale"),
    ("overdue", "Tasks the sweeper recorded as past their due time"),
    ("escalated", "Tasks the sweeper recorded as past their escalation time"),
    ("parked", "Tasks set aside before starting: their upstream's breaker open or rate limit full"),
    ("replayed", "Calls that repeated one already done (a resent submit, claim, complete, cancel, ...)"),
)


def time_totals(engine, queues: list[str]) -> dict[str, dict[str, int]]:
    """Per queue, the raw ``tis_ms:*``/``stage_*`` totals (ms) and counts of its stats hash (the
    fields engine/core/stats.py turns into means), and its ``wait_*``/``run_*`` histograms."""
    pipe = engine.redis.pipeline(transaction=False)
    for q in queues:
        pipe.hgetall(engine.keys.queue_key(q, "stats"))
    return {
        q: {text(k): int(v) for k, v in raw.items() if text(k).startswith(("tis_", "stage_", "wait_", "run_"))}
        for q, raw in zip(queues, pipe.execute())
    }


class EngineCollector:
    """Reads the engine at each ``collect()`` (what generate_latest calls)."""

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        engine = self.engine
        stats = engine.stats()
        queues = list(stats)
        totals = time_totals(engine, queues)
        tasks = GaugeMetricFamily("ghostless_tasks", "Tasks in each state now", labels=["queue", "state"])
        entered = CounterMetricFamily(
            "ghostless_transitions", "Tasks that entered each state", labels=["queue", "state"]
        )
        failures = CounterMetricFamily(
            "ghostless_failures", "Failed attempts per error kind", labels=["queue", "error_kind"]
        )
        counters = {name: CounterMetricFamily(f"ghostless_{name}", doc, labels=["queue"]) for name, doc in COUNTERS}
        in_state = SummaryMetricFamily(
            "ghostless_time_in_state_seconds",
            "Time tasks spent in a state before leaving it",
            labels=["queue", "state"],
        )
        in_stage = SummaryMetricFamily(
            "ghostless_time_in_stage_seconds",
            "Time tasks spent in a stage before leaving it",
            labels=["queue", "stage"],
        )
        for q, st in stats.items():
            for state in State:
                tasks.add_metric([q, state.value], st["counts"][state.value])
                entered.add_metric([q, state.value], st["entered"][state.value])
            for kind, n in sorted(st["failures"].items()):
                failures.add_metric([q, kind], n)
            for name, family in counters.items():
                family.add_metric([q], st[name])
            raw = totals[q]
            for state, n in sorted(st["left"].items()):  # the moves out of a state (stats.state_counts)
                if n:
                    in_state.add_metric([q, state], n, raw.get(f"tis_ms:{state}", 0) / 1000)
            for key in sorted(raw):
                if key.startswith("stage_n:"):
                    name = key.split(":", 1)[1]
                    in_stage.add_metric([q, name], raw[key], raw.get(f"stage_ms:{name}", 0) / 1000)
        breakers = GaugeMetricFamily(
            "ghostless_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open", labels=["queue", "upstream"]
        )
        for b in engine.breakers():
            breakers.add_metric([b["queue"], b["upstream"]], BREAKER_VALUES.get(b["state"], 2))
        limits = list(rate_limit_families(engine))
        draining = GaugeMetricFamily(
            "ghostless_queue_draining", "1 while the queue hands no task to workers", labels=["queue"]
        )
        drained = set(engine.draining())
        for q in queues:
            draining.add_metric([q], 1 if q in drained else 0)
        engine.data_epoch.adopt()
        lost = GaugeMetricFamily("ghostless_redis_data_lost", "1 once this process has seen Redis lose its data")
        lost.add_metric([], 1 if engine.data_epoch.lost else 0)
        yield from (tasks, entered, failures, *counters.values(), in_state, in_stage, breakers, *limits, draining, lost)
        yield from ops_families(engine, queues, totals)


RATE_GAUGES = (
    ("limit", "ghostless_rate_limit", "Attempt starts the upstream's rate limit allows per window"),
    ("period", "ghostless_rate_limit_window_seconds", "The rate limit's window"),
    ("used", "ghostless_rate_limit_used", "Attempt starts in the rate limit's current window"),
    ("available", "ghostless_rate_limit_available", "Starts the rate limit allows now"),
    ("parked", "ghostless_rate_limit_waiting", "Tasks parked by the rate limit now, waiting for their slot"),
)


def rate_limit_families(engine):
    """The rate limit families, one sample per (queue, upstream) with a limit."""
    rows = engine.rate_limits()
    for field, name, doc in RATE_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["queue", "upstream"])
        for r in rows:
            family.add_metric([r["queue"], r["upstream"]], r[field])
        yield family
    parks = CounterMetricFamily(
        "ghostless_rate_limit_parked", "Tasks parked by the rate limit so far", labels=["queue", "upstream"]
    )
    for r in rows:
        parks.add_metric([r["queue"], r["upstream"]], r["parked_total"])
    yield parks


def _check_access() -> None:
    config = current_app.config
    if config["GHOSTLESS_METRICS_PUBLIC"]:
        return
    token = config.get("GHOSTLESS_METRICS_TOKEN")
    scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode()):
        return
    user = current_user()
    if user is not None and user.admin:
        return
    if user is not None:
        raise ApiError(403, "forbidden", "metrics are for operators: an admin, or the metrics token")
    raise ApiError(
        401, "unauthorized", "metrics need the metrics token (GHOSTLESS_METRICS_TOKEN) or an admin", UNAUTHORIZED
    )


@bp.get("/metrics")
def metrics():
    _check_access()
    return Response(
        generate_latest(EngineCollector(get_engine())),
        content_type=CONTENT_TYPE_LATEST,
        headers={"Cache-Control": "no-store"},
    )
