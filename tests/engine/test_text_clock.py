"""The core's small shared helpers: Redis replies as text, Redis TIME in ms, the retry pause
(engine/core/text.py, engine/core/clock.py)."""

from __future__ import annotations

import fakeredis
import pytest

from ghostless.core.clock import RETRY_BASE, retry_delay, server_ms
from ghostless.core.text import decoded, text, text_or_none


@pytest.mark.parametrize("value, want", [(b"caf\xc3\xa9", "café"), ("café", "café"), (None, ""), (42, "42"), (b"", "")])
def test_text(value, want):
    assert text(value) == want


@pytest.mark.parametrize("value, want", [(b"x", "x"), ("x", "x"), (None, None), (b"", ""), (7, "7")])
def test_text_or_none_keeps_a_missing_value_missing(value, want):
    assert text_or_none(value) == want


def test_decoded_decodes_nested_script_replies_and_keeps_numbers():
    assert decoded([b"a", 1, [b"b", None, [b"c"]], "d"]) == ["a", 1, ["b", None, ["c"]], "d"]
    assert decoded(3) == 3 and decoded(b"x") == "x"


@pytest.mark.parametrize("decode", [False, True])
def test_server_ms_is_redis_time_in_whole_milliseconds(redis_client, decode):
    client = redis_client if not decode else fakeredis.FakeRedis(decode_responses=True)
    sec, usec = client.time()
    got = server_ms(client)
    after_sec, after_usec = client.time()
    assert isinstance(got, int)
    assert int(sec) * 1000 + int(usec) // 1000 <= got <= int(after_sec) * 1000 + int(after_usec) // 1000


def test_server_ms_truncates_microseconds():
    class Clock:
        def time(self):
            return 1_700_000_000, 999_999

    assert server_ms(Clock()) == 1_700_000_000_999


def test_retry_delay_doubles_up_to_its_doublings_and_ceiling():
    assert [retry_delay(n, 100.0) for n in range(8)] == [RETRY_BASE * 2 ** min(n, 5) for n in range(8)]
    assert retry_delay(1, 100.0) == 0.2 and retry_delay(7, 100.0) == pytest.approx(3.2)
    assert retry_delay(7, 100.0, doublings=6) == pytest.approx(6.4)
    assert retry_delay(7, 1.0) == 1.0  # the caller's ceiling (e.g. its tick interval) wins
    assert retry_delay(0, 0.05) == 0.05


def test_retry_delay_after_a_very_long_outage_stays_at_the_ceiling():
    # The SSE reader once computed 0.1 * 2 ** failures unbounded: after ~1000 failures in a row
    # (about 80 minutes of Redis away at 5 s each) the float overflowed and the reader thread died.
    assert retry_delay(5000, 5.0, doublings=6) == 5.0
