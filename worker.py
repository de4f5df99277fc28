"""The RQ worker entry point: ``python worker.py --app myapp.tasks:engine [QUEUE ...]``.

Thin on purpose: the worker classes live in engine/worker.py, the command in
engine/cli.py (``ghostless worker`` is the same command).
"""
from engine.cli import worker_command

if __name__ == "__main__":
    worker_command(prog_name="worker.py")
