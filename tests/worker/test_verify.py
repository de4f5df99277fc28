"""Result checks: a type's verify() runs before SUCCESS is recorded; a rejected result is retried."""

import pytest

from ghostless import State
from ghostless.execution.runner import execute


@pytest.fixture
def checked(engine):
    uploaded = set()

    def exists(result, ctx):
        return result["key"] in uploaded

    @engine.task(name="upload", queue="images", lease=30, max_attempts=3, backoff=[0.01], verify=exists)
    def upload(ctx, key, really=True):
        if really:
            uploaded.add(key)
        return {"key": key}

    return engine


def test_a_verified_result_is_recorded_as_success(checked):
    task = checked.submit("upload", {"key": "a.png"}, owner="alice")
    execute(checked, checked.claim(task.id, "w1"))
    assert checked.get(task.id).status == State.SUCCESS


def test_a_rejected_result_fails_the_attempt_as_verification_failed_and_is_retried(checked):
    task = checked.submit("upload", {"key": "b.png", "really": False}, owner="alice")
    execute(checked, checked.claim(task.id, "w1"))
    got = checked.get(task.id)
    assert (got.status, got.error_kind, got.result) == (State.RETRY_WAITING, "verification_failed", None)
