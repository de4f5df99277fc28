"""The `ghostless` command: the root group and its command groups.

This module is the one that registers the command groups: root.py defines the group (and its own
commands), ops.py and admin.py add theirs to it when imported here. Importing any ghostless.cli
module runs this first, so ``main`` always has every command.
"""

from ghostless.cli import (
    admin as _admin,  # noqa: F401  reclaim, retry-failed, drain, resume
    ops as _ops,  # noqa: F401  submit, show, cancel, edit, retry, tail, stats, check, scheduler
)
from ghostless.cli.root import main, worker_command

__all__ = ["main", "worker_command"]
