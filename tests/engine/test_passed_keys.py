"""A script call passes the keys of its task that the script touches, and no other
(engine/core/lua_source.py task_keys_of): every key a script touches is in KEYS, and a call
that only renews a lease or reads a page does not send the 25 keys of a task."""

import pytest
import redis

from ghostless.core.config import Config
from ghostless.core.keys import TASK_OWN_KEYS, Keys, TaskKeys, new_task_id
from ghostless.core.lua_source import SCRIPTS, call_keys, preamble, task_keys_of


def test_each_script_passes_its_tasks_keys_in_their_order_with_the_hash_first():
    for name in SCRIPTS:
        passed = task_keys_of(name)
        assert list(passed) == [f for f in TaskKeys._fields if f in passed], name
        assert not passed or passed[0] == "task", name


def test_a_lease_renewal_and_a_page_read_pass_only_the_few_keys_they_touch():
    for name in ("heartbeat", "stage", "progress", "checkpoint", "read"):
        assert len(task_keys_of(name)) < len(TaskKeys._fields) // 3, (name, task_keys_of(name))


def test_a_call_passes_those_keys_then_its_extra_ones():
    keys = Keys("gl").task(new_task_id("images"))
    assert call_keys("progress", keys, ["x"]) == [*(getattr(keys, f) for f in task_keys_of("progress")), "x"]
    assert call_keys("due", [keys.leases], ["x"]) == [keys.leases, "x"]  # not a task's keys: as given


def test_a_script_that_touches_a_key_it_was_not_passed_fails_loudly(redis_client):
    keys = Keys("gl").task(new_task_id("images"))
    assert "ready" not in task_keys_of("progress")
    text = preamble("progress") + "\nreturn K.ready"
    passed = call_keys("progress", keys)
    with pytest.raises(redis.ResponseError, match="task key ready is not passed to this script"):
        redis_client.eval(text, len(passed), *passed, *Config().script_argv())
    assert redis_client.eval(preamble("progress") + "\nreturn K.events", len(passed), *passed) == keys.events.encode()


def test_the_head_a_claim_takes_over_has_no_key_the_claim_was_not_passed(redis_client):
    # lua/claim.lua's keys_at: the head's own keys, then its queue's as the claim was passed them
    k = Keys("gl")
    own, head = k.task(new_task_id("images")), k.task(new_task_id("images"))
    passed = call_keys("claim", own, [getattr(head, f) for f in TASK_OWN_KEYS])
    assert "index" not in task_keys_of("claim")
    text = preamble("claim") + "\nlocal KH = keys_at(#KEYS - OWN_KEYS)\nreturn {KH.task, KH.ready, KH.index}"
    with pytest.raises(redis.ResponseError, match="task key index is not passed to this script"):
        redis_client.eval(text, len(passed), *passed, *Config().script_argv())
    text = preamble("claim") + "\nlocal KH = keys_at(#KEYS - OWN_KEYS)\nreturn {KH.task, KH.ready}"
    assert redis_client.eval(text, len(passed), *passed) == [head.task.encode(), head.ready.encode()]
