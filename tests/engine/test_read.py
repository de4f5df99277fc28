"""Reading tasks (Engine.get/get_many, the web's snapshot): the owner is checked before anything
else is read, and reads work on a Redis at maxmemory, which refuses MULTI/EXEC."""

import pytest

from ghostless import Engine, State
from ghostless.web import queries as wq
from tests.conftest import register_test_types
from tests.support.lua import forget_lua
from tests.support.snapshots import in_state


def trapped(engine, task_id: str) -> None:
    """Make reading the task's args, result or history fail loudly: their keys (its body, and those
    of a task from before the body) become sets, so a GET, LINDEX or LRANGE of them is a WRONGTYPE
    error (a spy that also sees inside scripts)."""
    k = engine.keys.task(task_id)
    for key in (k.body, k.args, k.result, k.history):
        engine.redis.delete(key)
        engine.redis.sadd(key, "trap")


def test_a_foreign_tasks_lookup_never_reads_its_args_result_or_history(engine):
    task, _ = in_state(engine, State.SUCCESS, owner="alice")
    trapped(engine, task.id)
    # Before, get_many read args and result with the hash and checked the owner afterwards:
    # the trap went off (and a foreign task cost what its 1 MiB of args cost).
    assert engine.get(task.id, owner="bob") is None
    assert engine.get_many([task.id, task.id], owner="bob") == [None, None]
    assert wq.snapshot(engine, task.id, owner="bob") == (None, [], "0-0")


def test_the_trap_goes_off_for_the_owner_so_the_foreign_lookup_test_can_fail(engine):
    task, _ = in_state(engine, State.SUCCESS, owner="alice")
    trapped(engine, task.id)
    with pytest.raises(Exception, match="WRONGTYPE"):
        engine.get(task.id, owner="alice")


def test_a_foreign_task_answers_exactly_as_a_missing_one(engine):
    task, _ = in_state(engine, State.PENDING, owner="alice")
    missing = task.id[:-4] + ("0000" if not task.id.endswith("0000") else "1111")
    assert engine.get_many([task.id, missing], owner="bob") == [None, None]
    assert wq.snapshot(engine, task.id, owner="bob") == wq.snapshot(engine, missing, owner="bob")


def test_get_many_reads_tasks_of_several_queues_and_keeps_the_callers_order(engine):
    a, _ = in_state(engine, State.SUCCESS, owner="alice")
    b = engine.submit("brief", {}, owner="alice")
    c = engine.submit("render", {"prompt": "x"}, owner="bob")
    found = engine.get_many([b.id, "nonsense", a.id, c.id], owner="alice")
    assert [t and t.id for t in found] == [b.id, None, a.id, None]
    assert found[2].result == {"url": "s3://cat"} and found[2].args == {"prompt": "a cat"}
    assert [t.id for t in engine.get_many([c.id, a.id])] == [c.id, a.id]


def test_a_snapshot_carries_history_and_the_queues_newest_event_id(engine):
    task, _ = in_state(engine, State.SUCCESS, owner="alice")
    got, history, position = wq.snapshot(engine, task.id, owner="alice")
    newest = engine.redis.xrevrange(engine.keys.task(task.id).events, count=1)[0][0].decode()
    assert (got.status, position) == (State.SUCCESS, newest)
    assert [e.to for e in history if e.kind == "transition"][-1] == "SUCCESS"


@pytest.mark.slow
def test_reads_answer_normally_on_a_full_redis(private_redis):
    from ghostless.web import close_app, create_app

    server = private_redis()
    client = server.client()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    token = engine.users.add("alice")
    task, _ = in_state(engine, State.SUCCESS, owner="alice")
    forget_lua(client)  # the read script is loaded while Redis is full, too (by EVALSHA: functions.py)
    client.config_set("maxmemory", 1)  # noeviction: every write is refused from here on
    app = create_app({"TESTING": True, "SECRET_KEY": "k", "GHOSTLESS_ENGINE": engine})
    try:
        with pytest.raises(Exception, match=r"OOM|maxmemory"):
            client.set("probe", "1")  # Redis is full indeed
        # Before, each of these went through MULTI/EXEC and raised OutOfMemoryError.
        assert engine.get(task.id).status == State.SUCCESS
        assert engine.get(task.id, owner="alice").result == {"url": "s3://cat"}
        assert engine.get_many([task.id], owner="bob") == [None]
        assert [e.to for e in engine.history(task.id) if e.kind == "transition"][-1] == "SUCCESS"
        r = app.test_client().get(f"/api/tasks/{task.id}", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.get_data(as_text=True)
        assert r.get_json()["task"]["status"] == "SUCCESS"
    finally:
        client.config_set("maxmemory", 0)
        close_app(app)
