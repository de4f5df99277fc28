"""Per-address limits on failed logins and failed bearer checks (guessing and its load).

A fixed-window counter per client address and kind in the engine's Redis
(``Keys.rate_limit``): the first failure starts a window of ``..._WINDOW`` seconds (the key's
TTL); an address with ``..._LIMIT`` failures in it is refused with a 429 and ``Retry-After``
(the window's remainder) until the window ends. Only failures count, so a good credential
never adds to the counter, and an address's failures never slow any other address.

Kinds and config keys (0 turns a limit off):

- ``login``: ``POST /login`` and the login-link redeem, ``GHOSTLESS_LOGIN_LIMIT`` failed logins
  (10) per ``GHOSTLESS_LOGIN_WINDOW`` seconds (60). An address over it is refused before its
  token is looked at.
- ``bearer``: a failed ``Authorization: Bearer`` check, ``GHOSTLESS_BEARER_LIMIT`` (30) per
  ``GHOSTLESS_BEARER_WINDOW`` seconds (60). A good token costs nothing here and is never
  refused; a wrong one over the limit is a 429 instead of a 401.

The address is ``request.remote_addr``: behind a proxy, set ``GHOSTLESS_PROXIES`` (web/app.py).
"""

from __future__ import annotations

import math

from flask import current_app, request

from .deps import get_engine
from .errors import ApiError

KINDS = {
    "login": ("GHOSTLESS_LOGIN_LIMIT", "GHOSTLESS_LOGIN_WINDOW"),
    "bearer": ("GHOSTLESS_BEARER_LIMIT", "GHOSTLESS_BEARER_WINDOW"),
}
DEFAULTS = {
    "GHOSTLESS_LOGIN_LIMIT": 10,
    "GHOSTLESS_LOGIN_WINDOW": 60.0,
    "GHOSTLESS_BEARER_LIMIT": 30,
    "GHOSTLESS_BEARER_WINDOW": 60.0,
}


class RateLimited(ApiError):
    """429: too many failed attempts from this address; ``retry_after`` in whole seconds."""

    def __init__(self, kind: str, retry_after: int):
        what = "logins" if kind == "login" else "token checks"
        super().__init__(
            429,
            "rate_limited",
            f"too many failed {what} from this address; try again in {retry_after} s",
            {"Retry-After": str(retry_after)},
        )
        self.kind, self.retry_after = kind, retry_after


def _limit(kind: str) -> tuple[int, float]:
    attempts, window = (current_app.config[name] for name in KINDS[kind])
    return int(attempts), float(window)


def _key(kind: str) -> str:
    return get_engine().keys.rate_limit(kind, request.remote_addr or "")


def _retry_after(pttl: int, window: float) -> int:
    return max(1, math.ceil((pttl if pttl and pttl > 0 else window * 1000) / 1000))


def refuse_if_blocked(kind: str) -> None:
    """Raise RateLimited when this address has used up its failures of ``kind``."""
    attempts, window = _limit(kind)
    if attempts <= 0:
        return
    pipe = get_engine().redis.pipeline(transaction=False)
    pipe.get(_key(kind))
    pipe.pttl(_key(kind))
    count, pttl = pipe.execute()
    if count is not None and int(count) >= attempts:
        raise RateLimited(kind, _retry_after(pttl, window))


def count_failure(kind: str) -> None:
    """Count one failure of ``kind`` from this address; raise RateLimited once it is over the limit."""
    attempts, window = _limit(kind)
    if attempts <= 0:
        return
    key = _key(kind)
    # SET NX starts the window with its TTL, INCR keeps the TTL: atomic in MULTI, so no
    # counter is ever left without an expiry (which would block an address for good).
    pipe = get_engine().redis.pipeline(transaction=True)
    pipe.set(key, 0, px=max(1, int(window * 1000)), nx=True)
    pipe.incr(key)
    pipe.pttl(key)
    _, count, pttl = pipe.execute()
    if count > attempts:
        raise RateLimited(kind, _retry_after(pttl, window))
