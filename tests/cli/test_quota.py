"""``ghostless user quota``: a user's own submit limits, stored on their record; and the CLI's
submit, which like the API refuses internal task types."""

import json


def test_user_quota_sets_shows_and_clears_a_users_own_limits(engine, cli):
    engine.users.add("alice")
    r = cli("user", "quota", "alice", "--max-unfinished", "5", "--rate", "none")
    assert r.exit_code == 0, r.output
    assert r.output.strip() == "alice: max_unfinished=5, rate=none"
    assert engine.users.quota_overrides("alice") == {"max_unfinished": 5, "rate": None}
    r = cli("user", "quota", "alice", "--per", "30", "--json")
    assert json.loads(r.output) == {"max_unfinished": 5, "rate": None, "per": 30.0}
    assert cli("user", "quota", "alice", "--clear").output.strip() == "alice: the web app's defaults"
    assert engine.users.quota_overrides("alice") == {}


def test_user_quota_refuses_bad_values_and_unknown_users_with_exit_2(engine, cli):
    engine.users.add("alice")
    for args in (
        ["alice", "--max-unfinished", "lots"],
        ["alice", "--max-unfinished", "0"],
        ["alice", "--per", "none"],
        ["nobody", "--rate", "3"],
    ):
        r = cli("user", "quota", *args)
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)
    assert engine.users.quota_overrides("alice") == {}


def test_submit_refuses_a_type_the_app_marks_internal(engine, cli):
    r = cli("submit", "housekeeping")
    assert r.exit_code == 2 and "unknown task type 'housekeeping'" in r.stderr
    assert engine.list_tasks()[0] == []
