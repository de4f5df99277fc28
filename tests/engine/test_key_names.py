"""Key names come from engine/core/keys.py only: no module of the package formats one itself."""

import ast
from pathlib import Path

import ghostless
import ghostless.web
from ghostless.core import keys as keys_mod
from ghostless.core.keys import Keys

PACKAGE_DIRS = [Path(ghostless.__file__).parent, Path(ghostless.web.__file__).parent]
KEYS_PY = Path(keys_mod.__file__).resolve()


def key_like(node: ast.JoinedStr) -> bool:
    """An f-string that builds a key name: it formats the namespace (``keys.ns``), glues ``:``
    parts onto something of ``keys``, or writes a hash tag (``:{`` / ``}:``) itself."""
    text = "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
    exprs = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    attrs = {a.attr for e in exprs for a in ast.walk(e) if isinstance(a, ast.Attribute)}
    return "ns" in attrs or ("keys" in attrs and ":" in text) or ":{" in text or "}:" in text


def _f(source: str) -> ast.JoinedStr:
    return ast.parse(source, mode="eval").body


def test_the_detector_knows_a_key_name_from_other_text():
    for built in (
        'f"{engine.keys.ns}:scheduler_lock"',
        'f"{self.keys.ns}:periodic:{name}"',
        'f"gl:{{{queue}}}:dispatch"',
        'f"{engine.keys.queue_prefix(q)}:breaker:{name}"',
    ):
        assert key_like(_f(built)), built
    for text in (
        'f"periodic:{name}:{iso(start)}"',
        'f"{namespace}.{queue}"',
        'f"local C = {{{codes}}}"',
        'f"task {task_id}: {reason}"',
    ):
        assert not key_like(_f(text)), text


def test_no_key_name_is_formatted_outside_keys_py():
    found = []
    for folder in PACKAGE_DIRS:
        for path in sorted(folder.rglob("*.py")):
            if path.resolve() == KEYS_PY:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.JoinedStr) and key_like(node):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_periodic_keys_keep_their_names_outside_any_queue_slot():
    # Renaming them would lose every deployment's schedule state (its periods fire as new) and let
    # an old and a new scheduler tick at once; like the other keys of no queue, they carry no tag.
    keys = Keys("gl")
    assert keys.periodic_state("nightly") == "gl:periodic:nightly"
    assert keys.scheduler_lock() == "gl:scheduler_lock"
    assert "{" not in keys.periodic_state("nightly") + keys.scheduler_lock()
