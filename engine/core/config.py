"""Engine settings: retention, caps and timings, in one documented place."""

from __future__ import annotations

import math
from dataclasses import dataclass

DAY = 24 * 3600
#: A script that sets a deadline sooner than this wakes the sweepers (lib/record: place), so a
#: retry due in 0.3 s is promoted then, not at the sweeper's next wake-up (up to --interval).
WAKE_WITHIN = 1.0
#: Upper bounds (seconds) of the queue wait and run time histograms the scripts keep per queue
#: (lib/record: observe; web/metrics.py): seconds-long tasks to hours-long ones. Above the last: +Inf.
DURATION_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600)


@dataclass(frozen=True)
class Config:
    """Durations are in seconds (floats allowed); scripts receive milliseconds.

    Attributes:
        retention: how long a terminal task (hash, args, result, history) is kept
            before the sweeper deletes it.
        idempotency_ttl: how long an idempotency key names its task. Must not
            exceed ``retention``, so a key never outlives its task.
        stream_maxlen: approximate cap of each queue's event stream (XADD MAXLEN ~).
        history_maxlen: cap of each task's own history list.
        dispatch_grace: a PENDING task whose executor job was never recorded
            (the submitter crashed between the two) is re-dispatched after this.
        requeue_after: a QUEUED task is checked by the sweeper after this long
            (its executor job may have been lost).
        max_args_bytes / max_result_bytes: size limits of the JSON blobs.
        wait_replicas: with N > 0, every script that writes returns only once N replicas have
            its writes (Redis ``WAIT`` on the connection that ran it); else ReplicationTimeout
            (the write stands on the primary but may not survive a failover). 0: no wait.
        wait_timeout: how long a write waits for those replicas. Keep it below the client's
            socket timeout and well below the leases (a heartbeat waits too).
    """

    retention: float = 7 * DAY
    idempotency_ttl: float = DAY
    stream_maxlen: int = 10_000
    history_maxlen: int = 100
    dispatch_grace: float = 5.0
    requeue_after: float = 300.0
    max_args_bytes: int = 1 << 20
    max_result_bytes: int = 1 << 20
    wait_replicas: int = 0
    wait_timeout: float = 1.0

    def __post_init__(self):
        if self.idempotency_ttl > self.retention:
            raise ValueError("idempotency_ttl must not exceed retention (a key would outlive its task)")
        for name in ("retention", "idempotency_ttl", "dispatch_grace", "requeue_after"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("stream_maxlen", "history_maxlen"):  # counts: a whole float (1e4) is taken as its int
            value = getattr(self, name)
            whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
            if isinstance(value, bool) or not whole or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
            object.__setattr__(self, name, int(value))  # the scripts hand stream_maxlen to XADD as it comes
        if isinstance(self.wait_replicas, bool) or not isinstance(self.wait_replicas, int) or self.wait_replicas < 0:
            raise ValueError(f"wait_replicas must be an integer >= 0, got {self.wait_replicas!r}")
        if isinstance(self.wait_timeout, bool) or not isinstance(self.wait_timeout, (int, float)):
            raise ValueError(f"wait_timeout must be a number of seconds, got {self.wait_timeout!r}")
        if not self.wait_timeout > 0 or self.wait_timeout == float("inf"):
            raise ValueError(f"wait_timeout must be positive and finite, got {self.wait_timeout!r}")

    def script_argv(self) -> list[int]:
        """ARGV[1..4] of every script (lua/lib: CFG)."""
        return [self.stream_maxlen, self.history_maxlen, ms(self.retention), ms(self.dispatch_grace)]


def ms(seconds: float) -> int:
    return round(seconds * 1000)
