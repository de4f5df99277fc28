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


def submit_times(delay, due_in, escalate_in, expires_in) -> tuple[int, int, int, int]:
    """submit's durations in ms (0: none), checked: ``escalate_in`` after ``due_in``,
    ``expires_in`` after ``delay`` (a task that must start before it may would always expire)."""
    delay_ms = duration_ms("delay", delay)
    due_ms, escalate_ms, expires_ms = (
        duration_ms(name, value) if value is not None else 0
        for name, value in (("due_in", due_in), ("escalate_in", escalate_in), ("expires_in", expires_in))
    )
    if escalate_ms and escalate_ms <= due_ms:
        raise ValueError("escalate_in must be later than due_in")
    if expires_in is not None and expires_ms <= delay_ms:
        raise ValueError("expires_in must be later than delay (and above 0): the task could never start")
    return delay_ms, due_ms, escalate_ms, expires_ms
