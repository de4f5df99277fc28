"""ghostless check: invariants over every task; exit 0 when healthy, 1 when violated."""

import json

import fakeredis

from ghostless.core import check as check_mod


def test_check_of_a_healthy_redis_exits_0(engine, cli):
    engine.submit("render", {"prompt": "a"}, owner="alice")
    engine.claim(engine.submit("render", {"prompt": "b"}, owner="bob").id, "w1")
    result = cli("check")
    assert result.exit_code == 0, result.output
    assert "healthy: every invariant holds (2 queue(s), 2 task(s) checked" in result.stdout
    assert "VIOLATION" not in result.stdout


def test_check_finds_a_task_missing_from_its_deadline_set_and_exits_1(engine, cli):
    task = engine.submit("render", {"prompt": "a"}, owner="alice")
    engine.redis.zrem(engine.keys.task(task.id).dispatch, task.id)  # what a lost write would leave
    result = cli("check")
    assert result.exit_code == 1, result.output
    assert f"VIOLATION {task.id}: PENDING is in no set, expected exactly [dispatch]" in result.stdout
    assert "1 invariant violation(s)" in result.stdout
    report = json.loads(cli("check", "--json").stdout)
    assert report["healthy"] is False and report["tasks"] == 1 and len(report["violations"]) == 1


def test_check_reports_what_a_redis_crash_would_lose(engine, cli):
    engine.submit("render", {"prompt": "a"}, owner="alice")
    report = json.loads(cli("check", "--json").stdout)
    assert report["healthy"] is True
    assert len(report["server"]) == 2 and report["server"][1].startswith("data epoch ")
    if not isinstance(engine.redis, fakeredis.FakeRedis):  # the private redis-server: AOF off
        assert "Redis AOF is off" in report["server"][0]
        assert "redis: Redis AOF is off" in cli("check").stdout
    else:
        assert "persistence not verified" in report["server"][0]


def test_check_reports_progress_batch_by_batch(engine, monkeypatch):
    monkeypatch.setattr(check_mod, "CHUNK", 4)
    for i in range(10):
        engine.submit("render", {"prompt": str(i)}, owner="alice")
    seen = []
    assert check_mod.check(engine, progress=lambda queue, n: seen.append((queue, n))) == []
    assert seen == [("images", 4), ("images", 4), ("images", 2)]


def test_check_after_redis_restarted_without_persistence_exits_1_instead_of_healthy(private_redis, monkeypatch, cli):
    from tests.apps import ops

    server = private_redis()
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.ops:engine")
    monkeypatch.setenv("GHOSTLESS_TEST_NS", ops.NAMESPACE)
    monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
    monkeypatch.setenv("GHOSTLESS_REDIS_URL", server.url)
    engine = ops.build(server.client())
    engine.submit("render", {"prompt": "a"}, owner="alice")
    assert cli("check").exit_code == 0
    server.restart()  # AOF and RDB off: everything is gone
    result = cli("check")
    assert result.exit_code == 1, result.output
    assert "no ghostless data marker" in result.stdout and "healthy" not in result.stdout
    assert json.loads(cli("check", "--json").stdout)["healthy"] is False


def test_check_on_a_cluster_reports_the_persistence_of_every_primary(redis_cluster, monkeypatch, cli):
    """Each primary has its own settings: one with AOF on among two without is named as such."""
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.ops:engine")
    monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
    monkeypatch.setenv("GHOSTLESS_REDIS_URL", redis_cluster.url)
    redis_cluster.flushall()
    primaries = sorted(redis_cluster.master_nodes(), key=lambda n: n.port)
    on = primaries[0].client()
    on.config_set("appendonly", "yes")
    try:
        notes = json.loads(cli("check", "--json").stdout)["server"]
    finally:
        on.config_set("appendonly", "no")
    by_node = {n.split(": ", 1)[0]: n.split(": ", 1)[1] for n in notes if not n.startswith("data epoch")}
    assert sorted(by_node) == sorted(f"127.0.0.1:{n.port}" for n in primaries)
    assert "appendfsync everysec" in by_node[f"127.0.0.1:{primaries[0].port}"]
    assert all("AOF is off" in by_node[f"127.0.0.1:{n.port}"] for n in primaries[1:])
