"""Running tasks on RQ: the dispatcher, the worker classes, runner, heartbeat, contexts."""
