"""Checks of caller input shared by the Engine's calls: clear ValueErrors, never a bad write."""

from __future__ import annotations

import json
import math

from .config import ms

MAX_TEXT = 1024  # owner, idempotency key, reason, message
MAX_DURATION_DAYS = 366  # a delay, due_in, escalate_in, retry_in or park wait: at most a (leap) year


def text(name: str, value, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ValueError(f"{name} must be a non-empty string" if not empty else f"{name} must be a string")
    if len(value) > MAX_TEXT:
        raise ValueError(f"{name} is longer than {MAX_TEXT} characters")
    return value


def duration_ms(name: str, seconds) -> int:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or not 0 <= seconds <= MAX_DURATION_DAYS * 86400
    ):
        raise ValueError(f"{name} must be a number of seconds within 0..{MAX_DURATION_DAYS} days, got {seconds!r}")
    return ms(seconds)


def json_text(what: str, value, limit: int) -> str:
    """``value`` as the canonical JSON the engine stores, at most ``limit`` bytes."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} is not JSON-serialisable: {e}") from None
    if "\\ud" in text:  # a surrogate escape: fine in a pair, not alone (not Unicode text)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} holds text that is not valid Unicode (a lone surrogate)") from None
    if len(text.encode()) > limit:
        raise ValueError(f"{what} is {len(text.encode())} bytes of JSON, over the limit of {limit}")
    return text
