"""The `ghostless` command: the root group and its command groups."""
from ghostless.cli.root import main, worker_command

__all__ = ["main", "worker_command"]
