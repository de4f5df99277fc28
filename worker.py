"""The RQ worker entry point: ``python worker.py --app myapp.tasks:engine [QUEUE ...]``.

Thin on purpose: the worker classes live in engine/execution/worker.py, the command in
engine/cli/root.py (``ghostless worker`` is the same command).
"""

try:
    import ghostless  # noqa: F401  installed (pip install -e . in a checkout)
except ImportError:  # a bare checkout: engine/ is ghostless, web/ and lua/ lie beside it
    import importlib.util
    import sys
    from pathlib import Path

    _root = Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location(
        "ghostless", _root / "engine" / "__init__.py", submodule_search_locations=[str(_root / "engine"), str(_root)]
    )
    sys.modules["ghostless"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["ghostless"])

from ghostless.cli.root import worker_command

if __name__ == "__main__":
    worker_command(prog_name="worker.py")
