"""Config's counts (stream_maxlen, history_maxlen) reach the scripts as whole numbers.

The scripts hand stream_maxlen to XADD MAXLEN as the text it came as: Config(stream_maxlen=1e4)
reached Redis as "10000.0", which XADD refuses, so every call that records an event failed
(found in review: the scripts had read it with tonumber() before)."""

from __future__ import annotations

import pytest

from ghostless import Config, Engine, State
from tests.conftest import register_test_types


def test_a_whole_float_count_is_taken_as_its_int_and_the_scripts_write(redis_client):
    config = Config(stream_maxlen=1e4, history_maxlen=1e2)
    assert (config.stream_maxlen, config.history_maxlen) == (10_000, 100)
    assert config.script_argv()[:2] == [10_000, 100] and all(type(v) is int for v in config.script_argv())
    engine = register_test_types(Engine(redis_client, namespace="t", dispatcher=None, config=config))
    task = engine.submit("render", {}, owner="alice")
    assert engine.get(task.id).status == State.PENDING


@pytest.mark.parametrize("bad", [0, -5, 1.5, "100", None, True, float("nan"), float("inf")])
def test_a_count_that_is_no_whole_number_of_at_least_1_is_refused(bad):
    for name in ("stream_maxlen", "history_maxlen"):
        with pytest.raises(ValueError, match=name):
            Config(**{name: bad})
