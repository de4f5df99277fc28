"""Each lua/<verb>.lua header agrees with engine/core/states.py, engine/core/errors.py and its own body.

A header is the script's leading ``--`` comment: one sentence, then ``From:``, ``To:``,
``KEYS``, ``ARGV`` and ``Returns:`` lines, any of which may continue on ``--   `` lines.
These tests read files only; they need no Redis.
"""

import re

import pytest

from ghostless.core.errors import Code
from ghostless.core.lua_source import LIBS, LUA_DIR, SCRIPTS, needed_libs, source
from ghostless.core.states import TERMINAL, TRANSITIONS, State

LUA_FILES = sorted(p.stem for p in LUA_DIR.glob("*.lua"))
# they act on (or read) tasks but move none along the state machine
NOT_TRANSITIONS = {"purge", "overdue", "due", "read", "user"}
# What lua/lib/lease.lua's check_lease may return: REPLAYED only to ending verbs (complete, fail, release).
LIB_CHECK_LEASE = set(re.findall(r"\bC\.([A-Z_]+)", (LUA_DIR / "lib" / "lease.lua").read_text())) - {"REPLAYED"}
# What lua/lib/quota.lua's quota_check may return.
LIB_QUOTA_CHECK = set(re.findall(r"\bC\.([A-Z_]+)", (LUA_DIR / "lib" / "quota.lua").read_text()))


def split(name: str) -> tuple[dict[str, str], str]:
    """(header fields by name, body) of lua/<name>.lua."""
    lines = (LUA_DIR / f"{name}.lua").read_text().splitlines()
    header = []
    while lines and lines[0].startswith("--"):
        header.append(lines.pop(0))
    fields: dict[str, str] = {}
    current = None
    for i, line in enumerate(header):
        text = line[2:]
        if text.startswith("   ") and current:  # a continuation line
            fields[current] += " " + text.strip()
            continue
        m = re.match(r" (From|To|Then|Instead|Returns):\s*(.*)$", text)
        current = m.group(1) if m else f"line{i}"
        fields[current] = m.group(2) if m else text.strip()
    return fields, "\n".join(lines)


def states(value: str) -> set[State]:
    value = value.strip()
    if value == "(none)":
        return set()
    return {State(s.strip()) for s in value.split(",")}


def returned_codes(fields: dict[str, str]) -> set[str]:
    return set(re.findall(r"\{([A-Z_]+)", fields["Returns"]))


def body_codes(body: str) -> set[str]:
    """Codes the body can return: its own ``C.NAME`` and those of the lib helpers it calls."""
    codes = set(re.findall(r"\bC\.([A-Z_]+)", body))
    for ending in re.findall(r"check_lease\(.*,\s*(true|false)\)", body):
        codes |= LIB_CHECK_LEASE | ({"REPLAYED"} if ending == "true" else set())
    if re.search(r"\bquota_check\(", body):
        codes |= LIB_QUOTA_CHECK
    if re.search(r"\breplay\(", body):  # lib/record.lua: REPLAYED, once the repeat is counted
        codes.add("REPLAYED")
    return codes


def test_scripts_lists_every_lua_file_once():
    assert sorted(SCRIPTS) == LUA_FILES
    assert len(set(SCRIPTS)) == len(SCRIPTS)
    assert sorted(LIBS) == sorted(p.stem for p in (LUA_DIR / "lib").glob("*.lua"))


def test_every_transition_has_a_script_and_every_other_script_is_known():
    assert set(TRANSITIONS) <= set(LUA_FILES)
    assert set(LUA_FILES) - set(TRANSITIONS) == NOT_TRANSITIONS


@pytest.mark.parametrize("name", LUA_FILES)
def test_header_has_a_sentence_states_keys_argv_and_return_codes(name):
    fields, _ = split(name)
    first = fields["line0"]
    assert first.lower().startswith(f"{name}: ")  # "Claim: a worker takes ..."
    for needed in ("From", "To", "Returns"):
        assert fields.get(needed), f"lua/{name}.lua header has no {needed}: line"
    text = " ".join(fields.values())
    assert "KEYS[" in text and "ARGV[1..4]" in text


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_header_from_and_to_agree_with_the_transition_table(name):
    fields, _ = split(name)
    t = TRANSITIONS[name]
    assert states(fields["From"]) == set(t.sources)  # submit: "(none)", the task does not exist yet
    assert states(fields["To"]) == set(t.targets)


def test_purge_header_goes_from_the_terminal_states_to_none():
    fields, _ = split("purge")
    assert states(fields["From"]) == set(TERMINAL)
    assert states(fields["To"]) == set()


@pytest.mark.parametrize("name", ["due", "read"])
def test_read_only_headers_go_from_none_to_none(name):
    fields, _ = split(name)
    assert states(fields["From"]) == states(fields["To"]) == set()


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_return_code_in_the_header_exists_in_the_code_enum(name):
    fields, _ = split(name)
    codes = returned_codes(fields)
    assert codes, f"lua/{name}.lua Returns: names no code"
    assert codes <= set(Code.__members__)


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_code_the_body_returns_is_in_the_header_and_the_other_way_round(name):
    fields, body = split(name)
    assert body_codes(body) == returned_codes(fields)


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_state_change_in_the_body_is_its_own_verb_to_a_state_of_its_header(name):
    fields, body = split(name)
    for verb, target in re.findall(r"change\(\w+, \w+, '(\w+)', '(\w+)'", body):
        assert verb == name
        assert State(target) in states(fields["To"])


# lib/record.lua helpers that record another verb's transition, and that verb.
CHAINS = {"promote_now": "promote"}


@pytest.mark.parametrize("name", LUA_FILES)
def test_a_script_chains_into_another_verb_only_as_its_header_says_and_the_table_allows(name):
    fields, body = split(name)
    chained = {verb for helper, verb in CHAINS.items() if re.search(rf"\b{helper}\(", body)} - {name}
    named = set(re.findall(r"^(\w+)", fields.get("Then", "")))
    assert chained == named
    for verb in chained:  # the chained verb starts from a state this script ends in
        assert TRANSITIONS[verb].sources & states(fields["To"])


# lib/record.lua helpers that record another verb's transition in place of the script's own, and that verb.
INSTEAD = {"lapse_now": "lapse"}


@pytest.mark.parametrize("name", LUA_FILES)
def test_a_script_records_another_verb_instead_of_its_own_only_as_its_header_says_and_the_table_allows(name):
    fields, body = split(name)
    instead = {verb for helper, verb in INSTEAD.items() if re.search(rf"\b{helper}\(", body)} - {name}
    assert instead == set(re.findall(r"^(\w+)", fields.get("Instead", "")))
    for verb in instead:  # from any state the script starts from, that verb is legal
        assert states(fields["From"]) <= TRANSITIONS[verb].sources


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_argv_the_body_reads_is_documented_in_the_header(name):
    fields, body = split(name)
    documented = set()
    for lo, hi in re.findall(r"ARGV\[(\d+)(?:\.\.(\d+))?\]", " ".join(fields.values())):
        documented |= set(range(int(lo), int(hi or lo) + 1))
    used = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)}
    assert used <= documented


@pytest.mark.parametrize("name", LUA_FILES)
def test_loaded_source_is_preamble_libs_then_the_script(name):
    text = source(name)
    assert text.index("local C = {") < text.index(f"-- lua/{name}.lua")
    if "time" in needed_libs(name):  # lua/read.lua, reading no clock, needs no lib
        assert text.index("local C = {") < text.index("local function now_ms") < text.index(f"-- lua/{name}.lua")
    assert text.endswith((LUA_DIR / f"{name}.lua").read_text())
