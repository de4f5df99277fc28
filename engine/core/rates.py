"""Rate limits per upstream: ``@engine.task(upstream="image-model", rate="20/s")``.

At most ``limit`` attempts of the upstream's types start in any ``period`` seconds, across every
worker: the claim script decides on Redis time (lua/lib/limit.lua) with a sliding log of the
upstream's start times. A claim over the limit changes nothing; the worker parks the task (the
breaker's park: RETRY_WAITING, no attempt consumed) until its own start slot opens, in line behind
the tasks parked before it, and the sweeper hands it back at that moment.

Why a sliding log: a fixed window lets 2x the limit through across a window edge, and a token
bucket of ``limit`` tokens refilled over ``period`` lets up to 2x - 1 start in some window (a full
bucket spent at once, then the refill). The log holds one entry per start of the last period, so
"never more than ``limit`` in any window" is exact, and when a slot opens is known to the ms (when
a start leaves the window). Its cost is that entry: ~100 bytes a start, hence ``MAX_LIMIT``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .config import ms
from .errors import BadRate
from .text import text

UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_RATE_RE = re.compile(r"(\d+)/(\d*)([a-z]+)")
#: Starts one window may hold: the log keeps one entry per start in the window (~100 bytes each).
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Rate:
    """``limit`` attempt starts per ``period`` seconds (any window of that length, never more)."""

    limit: int
    period: float

    def __post_init__(self):
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or not 1 <= self.limit <= MAX_LIMIT:
            raise BadRate(f"{self.limit}/{self.period:g}s", f"the count must be an integer within 1..{MAX_LIMIT}")
        if isinstance(self.period, bool) or not isinstance(self.period, (int, float)) or not math.isfinite(self.period):
            raise BadRate(f"{self.limit}/{self.period!r}s", "the period must be a number of seconds")
        if not 0.001 <= self.period <= 86400:
            raise BadRate(f"{self.limit}/{self.period:g}s", "the period must be within 1 ms..1 day")

    @classmethod
    def parse(cls, value: str | Rate) -> Rate:
        """``"20/s"``, ``"600/min"``, ``"1000/h"``, ``"5/10s"``, ``"100/day"``; a Rate as it is.
        Raises BadRate (a ValueError) for anything else."""
        if isinstance(value, Rate):
            return value
        m = _RATE_RE.fullmatch(value.replace(" ", "").lower()) if isinstance(value, str) else None
        unit = (UNITS.get(m.group(3)) or UNITS.get(m.group(3).removesuffix("s"))) if m else None
        if not m or not unit or m.group(2).startswith("0"):
            raise BadRate(value, "write it as <count>/<unit>, unit s, min or h (or d), e.g. '20/s', '600/min', '5/10s'")
        try:
            return cls(int(m.group(1)), int(m.group(2) or 1) * unit)
        except BadRate as e:
            raise BadRate(value, e.why) from None

    def __str__(self) -> str:
        for name, seconds in (("h", 3600), ("min", 60), ("s", 1)):
            if self.period == seconds:
                return f"{self.limit}/{name}"
        return f"{self.limit}/{self.period:g}s"

    def spec(self, name: str) -> str:
        """The ARGV form read by lua/lib/limit.lua (limit_cfg): '<limit> <period ms> <name>'."""
        return f"{self.limit} {ms(self.period)} {name}"


def check_shared(types, new) -> None:
    """Types naming one upstream share its limit: the same rate, in one queue (a limit's log is in
    its queue's Redis Cluster slot, so a claim of another queue could not count it atomically).
    Raises ValueError naming the registered type that disagrees with ``new``."""
    for tt in types:
        if tt.breaker_name != new.breaker_name or (tt.rate is None and new.rate is None):
            continue
        if tt.rate != new.rate:
            raise ValueError(
                f"task types {tt.name!r} and {new.name!r} name upstream {new.breaker_name!r} with different "
                f"rates ({tt.rate or 'none'} and {new.rate or 'none'}): types naming one upstream share its limit"
            )
        if tt.queue != new.queue:
            raise ValueError(
                f"task types {tt.name!r} and {new.name!r} share the rate limit of upstream {new.breaker_name!r} "
                f"but are in queues {tt.queue!r} and {new.queue!r}: a limit lives in one queue"
            )


def states(engine) -> list[dict]:
    """One row per rate-limited upstream: its rate, starts in the current window, free slots,
    tasks parked by it now, and parks so far. Read on Redis time."""
    seen, rows = set(), []
    sec, micro = engine.redis.time()
    now = int(sec) * 1000 + int(micro) // 1000
    for tt in engine.registry:
        if tt.rate is None or (tt.queue, tt.breaker_name) in seen:
            continue
        seen.add((tt.queue, tt.breaker_name))
        log, parked = (
            engine.keys.rate_log(tt.queue, tt.breaker_name),
            engine.keys.rate_parked(tt.queue, tt.breaker_name),
        )
        used = engine.redis.zcount(log, f"({now - ms(tt.rate.period)}", "+inf")
        waiting = engine.redis.zcount(parked, f"({now}", "+inf")
        total = engine.redis.hget(engine.keys.queue_key(tt.queue, "stats"), f"rate_parked:{tt.breaker_name}")
        rows.append(
            {
                "queue": tt.queue,
                "upstream": tt.breaker_name,
                "rate": str(tt.rate),
                "limit": tt.rate.limit,
                "period": tt.rate.period,
                "used": used,
                "available": max(0, tt.rate.limit - used),
                "parked": waiting,
                "parked_total": int(text(total) or 0),
            }
        )
    return rows
