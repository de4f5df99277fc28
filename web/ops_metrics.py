"""The ``/metrics`` families people alert on (web/metrics.py yields them after its own):

- ``ghostless_sweeper_last_tick_age_seconds{sweeper}``: seconds since each sweeper's last
  recorded tick (engine/core/sweepers.py: a sweeper silent for 10 minutes drops out).
- ``ghostless_sweeper_freshest_tick_age_seconds``: the smallest of those; ``+Inf`` when no
  sweeper is listed (none ever ran, or all have been silent for 10 minutes).
- ``ghostless_oldest_task_age_seconds{queue,state}``: how long the oldest PENDING (QUEUED) task
  of the queue has waited for a worker; 0 when none waits.
- ``ghostless_workers{queue}``: live workers serving the queue (RQ's worker registry).
- ``ghostless_queue_wait_seconds{queue}`` and ``ghostless_run_seconds{queue}``: histograms of
  the wait for a worker (entering PENDING, or a delay ending, to the claim) and of each attempt's
  run (claim to its end: complete, fail, release, lease lapsed, cancel).
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ghostless.core.stats import histogram, waiting_ages
from ghostless.core.sweepers import tick_ages

HISTOGRAMS = (
    (
        "wait",
        "ghostless_queue_wait_seconds",
        "Time tasks waited for a worker: from PENDING (or the end of a delay) to the claim",
    ),
    ("run", "ghostless_run_seconds", "Time each attempt ran: from its claim to its end"),
)


def ops_families(engine, queues: list[str], totals: dict[str, dict[str, int]]):
    """The families above, for ``queues`` (``totals``: each queue's raw stats fields)."""
    ages = tick_ages(engine)
    per_sweeper = GaugeMetricFamily(
        "ghostless_sweeper_last_tick_age_seconds", "Seconds since the sweeper's last tick", labels=["sweeper"]
    )
    for name, age in sorted(ages.items()):
        per_sweeper.add_metric([name], age)
    freshest = GaugeMetricFamily(
        "ghostless_sweeper_freshest_tick_age_seconds", "Seconds since any sweeper's last tick (+Inf: no sweeper)"
    )
    freshest.add_metric([], min(ages.values()) if ages else float("inf"))
    yield from (per_sweeper, freshest)

    oldest = GaugeMetricFamily(
        "ghostless_oldest_task_age_seconds",
        "How long the queue's oldest task in the state has waited for a worker",
        labels=["queue", "state"],
    )
    for q, by_state in waiting_ages(engine, queues).items():
        for state, age in by_state.items():
            oldest.add_metric([q, state], age)
    yield oldest

    serving: dict[str, set[str]] = {q: set() for q in queues}
    for w in engine.dispatcher.workers():
        for q in w["queues"]:
            serving.setdefault(q, set()).add(w["name"])
    workers = GaugeMetricFamily("ghostless_workers", "Live workers serving the queue", labels=["queue"])
    for q, names in sorted(serving.items()):
        workers.add_metric([q], len(names))
    yield workers

    for name, metric, doc in HISTOGRAMS:
        family = HistogramMetricFamily(metric, doc, labels=["queue"])
        for q in queues:
            buckets, total, _ = histogram(totals[q], name)
            family.add_metric([q], [(floatToGoString(le), n) for le, n in buckets], total)
        yield family
