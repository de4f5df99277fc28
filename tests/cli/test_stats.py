"""ghostless stats: counts per queue and state, time in state and stage, failures (no scan)."""

import json


def _some_traffic(engine):
    done = engine.submit("render", {"prompt": "a"}, owner="alice")
    lease = engine.claim(done.id, "w1")
    engine.stage(lease, "generating")
    engine.complete(lease, {"url": "x"})
    failed = engine.submit("render", {"prompt": "b"}, owner="alice")
    engine.fail(engine.claim(failed.id, "w1"), "bad_prompt", "refused")
    engine.submit("render", {"prompt": "c"}, owner="bob")


def test_stats_table_counts_tasks_per_state_and_failures_by_kind(engine, cli):
    _some_traffic(engine)
    result = cli("stats")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0].split()
    images = dict(zip(header, next(line.split() for line in lines[1:] if line.startswith("images"))))
    assert (images["PENDING"], images["SUCCESS"], images["FAILED"], images["PROCESSING"]) == ("1", "1", "1", "0")
    assert "mean time in state" in result.stdout and "mean time in stage" in result.stdout
    failures = result.stdout.split("failures by kind")[1].split()
    assert failures[failures.index("bad_prompt") + 1] == "1"


def test_stats_json_is_the_engine_stats(engine, cli):
    _some_traffic(engine)
    assert json.loads(cli("stats", "--json").stdout) == json.loads(json.dumps(engine.stats()))
