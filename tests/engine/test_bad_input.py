"""Bad input to the engine's calls, ids it never made, illegal moves, and servers it must refuse.

Bad input is refused before any script runs (ValueError) and changes nothing; ids the engine
did not make are TaskNotFound (never a key built from user input); illegal moves raise the
typed errors of engine/core/errors.py with their context.
"""

import pytest

from ghostless import Config, Engine, IllegalTransition, LeaseLost, RedisSetupError, State, TaskCancelled, TaskNotFound
from ghostless.core.server import check_server
from tests.support.snapshots import claimed, sibling, snapshot

NOT_IDS = ["nope", "../x", "images.XYZ", None, 123, "images.0123456789ABCDEF0123", "images.0123456789abcdef0123/x"]


# -- lease-holder calls ---------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [-0.01, 1.01, True, False, "0.5", None, float("nan"), float("inf")])
def test_progress_outside_zero_to_one_or_not_a_number_is_a_value_error(engine, fraction):
    task, lease = claimed(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(ValueError, match=r"progress must be a number within 0\.\.1"):
        engine.progress(lease, fraction)
    assert snapshot(engine, task.id) == before


@pytest.mark.parametrize("fraction", [0, 1, 0.0, 1.0, 0.999])
def test_progress_at_the_bounds_is_accepted(engine, fraction):
    task, lease = claimed(engine)
    engine.progress(lease, fraction)
    assert engine.get(task.id).progress == fraction


@pytest.mark.parametrize("type, declared", [("render", "declared: generating, uploading"), ("brief", "declared: none")])
def test_undeclared_stage_is_a_value_error_naming_the_declared_stages(engine, type, declared):
    task, lease = claimed(engine, type)
    before = snapshot(engine, task.id)
    with pytest.raises(ValueError, match=f"declares no stage 'painting' \\({declared}\\)"):
        engine.stage(lease, "painting")
    assert snapshot(engine, task.id) == before


@pytest.mark.parametrize(
    "result, problem",
    [
        (object(), "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({1, 2}, "not JSON-serialisable"),
        ({"x": "y" * 64}, "over the limit of 64"),
    ],
)
def test_result_that_is_not_json_or_too_big_is_a_value_error_and_the_task_is_unchanged(engine, result, problem):
    engine = sibling(engine, config=Config(max_result_bytes=64))
    task, lease = claimed(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(ValueError, match=problem):
        engine.complete(lease, result)
    assert snapshot(engine, task.id) == before
    assert engine.complete(lease, {"x": "fits"}) == State.SUCCESS  # the lease still holds


def test_checkpoint_value_that_is_not_json_is_a_value_error(engine):
    task, lease = claimed(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(ValueError, match="checkpoint is not JSON-serialisable"):
        engine.checkpoint(lease, "page", object())
    assert snapshot(engine, task.id) == before


@pytest.mark.parametrize("kind", ["", "  ", None, "x" * 1025])
def test_failure_without_a_usable_error_kind_is_a_value_error(engine, kind):
    task, lease = claimed(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(ValueError, match="error_kind"):
        engine.fail(lease, kind)
    assert snapshot(engine, task.id) == before


# -- ids the engine did not make ------------------------------------------------------------------


@pytest.mark.parametrize("task_id", NOT_IDS)
def test_id_not_made_by_the_engine_is_task_not_found_for_every_call(engine, task_id):
    keys_before = engine.redis.dbsize()
    calls = {
        "claim": lambda: engine.claim(task_id, "w1"),
        "cancel": lambda: engine.cancel(task_id, by="alice", admin=True),
        "edit": lambda: engine.edit(task_id, {"prompt": "x"}, by="alice", admin=True),
        "retry": lambda: engine.retry(task_id, by="alice", admin=True),
    }
    for name, call in calls.items():
        with pytest.raises(TaskNotFound) as err:
            call()
        assert err.value.task_id == str(task_id), name
    assert engine.get(task_id) is None
    assert engine.history(task_id) == [] and engine.checkpoints(task_id) == {}
    assert engine.redis.dbsize() == keys_before


# -- illegal moves --------------------------------------------------------------------------------


def test_completing_a_cancelled_task_is_refused_as_cancelled(engine):
    task, lease = claimed(engine)
    engine.cancel(task.id, by="alice")
    with pytest.raises(TaskCancelled) as err:
        engine.complete(lease, {"url": "x"})
    assert isinstance(err.value, LeaseLost)
    assert (err.value.task_id, err.value.state) == (task.id, "CANCELLED")
    assert engine.get(task.id).result is None


def test_retrying_a_successful_task_is_an_illegal_transition_naming_state_and_verb(engine):
    task, lease = claimed(engine)
    engine.complete(lease, {})
    with pytest.raises(IllegalTransition) as err:
        engine.retry(task.id, by="alice")
    assert (err.value.task_id, err.value.state, err.value.verb) == (task.id, State.SUCCESS, "retry")
    assert "cannot retry" in str(err.value)


def test_claiming_a_processing_task_is_an_illegal_transition(engine):
    task, lease = claimed(engine)
    with pytest.raises(IllegalTransition) as err:
        engine.claim(task.id, "w2")
    assert (err.value.state, err.value.verb) == (State.PROCESSING, "claim")
    engine.heartbeat(lease)  # the holder keeps its lease


# -- the Redis server -----------------------------------------------------------------------------


class FakeServer:
    """Answers INFO and CONFIG GET like a Redis of the given version and eviction policy."""

    def __init__(self, version: str, policy: str = "noeviction"):
        self.version, self.policy = version, policy

    def info(self, section=None):
        return {"redis_version": self.version}

    def config_get(self, name):
        return {"maxmemory-policy": self.policy}


@pytest.mark.parametrize("version", ["6.0.0", "5.0.14", "6.1.9"])
def test_redis_older_than_6_2_is_a_setup_error(version):
    with pytest.raises(RedisSetupError, match=f"Redis {version} is too old"):
        check_server(FakeServer(version))


@pytest.mark.parametrize("version", ["6.2.0", "7.0.15", "10.0.0"])
def test_redis_6_2_or_newer_with_noeviction_passes(version):
    assert check_server(FakeServer(version)) == []


def test_redis_that_may_evict_keys_warns_and_strict_refuses(private_redis):
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    with pytest.warns(RuntimeWarning, match="maxmemory-policy is 'allkeys-lru'"):
        Engine(server.client(), dispatcher=None)
    with pytest.raises(RedisSetupError, match="noeviction"):
        Engine(server.client(), dispatcher=None, strict=True)
    ok = private_redis()  # noeviction: neither warns nor raises (warnings are errors here)
    Engine(ok.client(), dispatcher=None, strict=True)


def test_args_with_a_lone_surrogate_are_a_value_error_and_a_pair_is_fine(engine):
    with pytest.raises(ValueError, match="not valid Unicode"):
        engine.submit("render", {"prompt": "\ud800"}, owner="alice")
    assert engine.submit("render", {"prompt": "\U0001f600"}, owner="alice").args == {"prompt": "\U0001f600"}
