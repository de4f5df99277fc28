"""engine/core/scripts.py is the one place that calls Lua: one typed wrapper per script (or one
described call in engine/core/plans.py, which Scripts.run and AsyncScripts.run run), sent by
engine/core/functions.py alone; and submit's positional ARGV named by a NamedTuple whose field order
is checked against lua/submit.lua."""

import ast
import inspect
import re
from pathlib import Path

import ghostless
import ghostless.web
from ghostless import Config
from ghostless.core import functions, plans, scripts as scripts_mod
from ghostless.core.lua_source import LUA_DIR, SCRIPTS, preamble
from ghostless.core.scripts import Scripts, SubmitArgs

PACKAGE_DIRS = [Path(ghostless.__file__).parent, Path(ghostless.web.__file__).parent]
SCRIPTS_PY = Path(scripts_mod.__file__).resolve()
SENDERS = {SCRIPTS_PY, Path(functions.__file__).resolve()}
#: redis-py's ways of loading and running Lua: only scripts.py and functions.py may use them
RAW = {
    "register_script",
    "evalsha",
    "eval",
    "eval_ro",
    "evalsha_ro",
    "script_load",
    "fcall",
    "fcall_ro",
    "function_load",
}
#: the same as raw commands (``execute_command("FCALL", ...)``): only functions.py builds them
RAW_COMMANDS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "FUNCTION"}
CFG_ARGS = 4  # ARGV[1..4]: the engine config every script takes first (scripts.preamble: CFG)


def _package_sources():
    for folder in PACKAGE_DIRS:
        for path in sorted(folder.rglob("*.py")):
            yield path.resolve(), ast.parse(path.read_text(), str(path))


def _names_scripts(node) -> bool:
    """``scripts`` or ``<anything>.scripts``: a Scripts instance, as the engine names it."""
    return (isinstance(node, ast.Name) and node.id == "scripts") or (
        isinstance(node, ast.Attribute) and node.attr == "scripts"
    )


def test_every_script_has_its_own_wrapper_on_scripts_or_its_own_plan():
    for name in SCRIPTS:
        plan = getattr(plans, name, None) or getattr(plans, name + "s", None)
        if plan is not None:  # a client call's script, described once for both engines
            assert re.search(rf"Plan\(\s*\"{name}\"", inspect.getsource(plan)), name
            continue
        wrapper = getattr(Scripts, name, None)
        assert callable(wrapper), f"neither Scripts nor plans has a wrapper for lua/{name}.lua"
        # It runs its own script, by name (through _call, _hold for the lease holder's calls, or
        # _read for a read-only one the web may send in a shared pipeline).
        assert re.search(rf"self\._(call|hold|read)\(\s*\"{name}\"", inspect.getsource(wrapper)), name


def test_no_generic_or_public_raw_call_remains():
    for old in ("call", "holder", "manage"):
        assert not hasattr(Scripts, old), f"Scripts.{old} is back: call a typed wrapper instead"


def test_nothing_outside_scripts_py_calls_lua_raw():
    found = []
    for path, tree in _package_sources():
        if path in SENDERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in RAW_COMMANDS:
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if not isinstance(node, ast.Attribute):
                continue
            if node.attr in RAW or (node.attr == "_call" and _names_scripts(node.value)):
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert found == []


def test_the_scan_sees_the_package():
    names = {path.name for path, _ in _package_sources()}
    assert {"engine.py", "sweep.py", "claim_calls.py", "lease_calls.py", "dependencies.py", "queries.py"} <= names


def _submit_argv_locals() -> dict[int, str]:
    """ARGV index -> the local lua/submit.lua binds it to (``local x = ARGV[n]`` or ``tonumber(ARGV[n])``)."""
    text = (LUA_DIR / "submit.lua").read_text()
    bound = {}
    for names, values in re.findall(r"^local ([\w, ]+?) = (.+)$", text, re.M):
        values = re.sub(r"\s*--.*$", "", values)
        for name, value in zip(names.split(","), values.split(",")):
            m = re.fullmatch(r"(?:tonumber\()?ARGV\[(\d+)\]\)?", value.strip())
            if m:
                bound[int(m.group(1))] = name.strip()
    return bound


def test_every_script_takes_the_engine_config_first():
    assert len(Config().script_argv()) == CFG_ARGS
    assert max(map(int, re.findall(r"ARGV\[(\d+)\]", preamble()))) == CFG_ARGS


def test_submit_args_field_order_is_the_argv_order_submit_lua_reads():
    bound = _submit_argv_locals()
    *named, parents = SubmitArgs._fields
    assert parents == "parent_ids"
    expected = {CFG_ARGS + 1 + i: field for i, field in enumerate(named)}
    expected[CFG_ARGS + 1 + len(named)] = "n_parents"  # then the parents' ids
    assert bound == expected
    text = (LUA_DIR / "submit.lua").read_text()
    first_parent = CFG_ARGS + 2 + len(named)
    assert f"table.concat(ARGV, ',', {first_parent}, {first_parent - 1} + n_parents)" in text
    body = text.split(f"local n_parents = tonumber(ARGV[{first_parent - 1}])")[1]
    read_again = [n for n in map(int, re.findall(r"ARGV\[(\d+)\]", body)) if n > CFG_ARGS and n < first_parent]
    assert read_again == []  # the body uses the named locals only


def test_submit_args_argv_puts_the_parent_count_before_the_ids():
    args = SubmitArgs(*[f"v{i}" for i in range(len(SubmitArgs._fields) - 1)], parent_ids=("q.a", "q.b"))
    assert args.argv() == [*(f"v{i}" for i in range(len(SubmitArgs._fields) - 1)), 2, "q.a", "q.b"]
