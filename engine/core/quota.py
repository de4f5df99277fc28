"""Submit quotas: how much one owner may submit, per queue.

A Quota passed to Engine.submit / Engine.edit is enforced inside the script that creates the
task (lua/lib/quota.lua), atomically with the creation: every key a script touches lives in
the task's queue, so limits apply per owner *per queue*. The counts they read (unfinished
tasks and their args bytes, per owner) are kept by every state change (lua/lib/record.lua) and
verified by ``ghostless check``. Python callers pass no quota by default (no limit); the web app
applies WEB_DEFAULT, which each user's record may override (engine/core/users.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .config import ms

FIELDS = ("rate", "per", "max_unfinished", "max_args_bytes", "max_unfinished_bytes")


@dataclass(frozen=True)
class Quota:
    """Limits on one owner's submits in one queue; None is no limit.

    Attributes:
        rate / per: at most ``rate`` submits (edits count too) per ``per`` seconds, as a token
            bucket: a burst of ``rate`` at once, then one every ``per / rate`` seconds.
        max_unfinished: tasks of the owner that have not ended (PENDING .. RETRY_WAITING).
        max_args_bytes: JSON bytes of one task's args (also capped by Config.max_args_bytes);
            over it is a ValueError, since waiting would not help.
        max_unfinished_bytes: args bytes summed over the owner's unfinished tasks.
    """

    rate: int | None = None
    per: float = 60.0
    max_unfinished: int | None = None
    max_args_bytes: int | None = None
    max_unfinished_bytes: int | None = None

    def __post_init__(self):
        for name in ("rate", "max_unfinished", "max_args_bytes", "max_unfinished_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"quota {name} must be a positive integer or None (no limit)")
        if (
            isinstance(self.per, bool)
            or not isinstance(self.per, (int, float))
            or not (math.isfinite(self.per) and 0.001 <= self.per <= 86400)
        ):
            raise ValueError("quota per must be a number of seconds within 0.001..86400")

    @property
    def unlimited(self) -> bool:
        return all(getattr(self, f) is None for f in FIELDS if f != "per")

    def spec(self) -> str:
        """The ARGV form read by lua/lib/quota.lua (quota_check); 0 is no limit."""
        return "%d %d %d %d" % (self.rate or 0, ms(self.per), self.max_unfinished or 0, self.max_unfinished_bytes or 0)

    def with_overrides(self, overrides: dict | None) -> Quota:
        """This quota with some fields replaced (a user's record: engine/core/users.py)."""
        return dataclasses.replace(self, **{k: v for k, v in (overrides or {}).items() if k in FIELDS})


#: The web app's default for every user (web/quotas.py): what an interactive service lives with.
WEB_DEFAULT = Quota(rate=60, per=60.0, max_unfinished=100, max_args_bytes=64 << 10, max_unfinished_bytes=10 << 20)


def parse_overrides(raw: dict) -> dict:
    """Validated quota fields from untrusted input (CLI, env, config): ValueError when bad."""
    if not isinstance(raw, dict):
        raise ValueError("a quota must be a JSON object")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown quota field(s): {', '.join(map(str, unknown))} (known: {', '.join(FIELDS)})")
    Quota().with_overrides(raw)  # raises ValueError on a bad value
    return dict(raw)
