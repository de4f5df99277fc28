"""Tasks in a given state for web tests (owned by alice unless told), made through the engine."""

from __future__ import annotations

import threading

from ghostless import Engine, State
from tests.support.snapshots import GHOST, in_state
from tests.support.wait import wait_until

__all__ = ["GHOST", "task_in", "when_subscribed"]


def task_in(engine: Engine, state: State, owner: str = "alice", type: str = "render"):
    """A task of ``owner`` in ``state``, as the engine reads it now."""
    return engine.get(in_state(engine, state, owner, type)[0].id)


def when_subscribed(broker, action, subscribers: int = 1) -> threading.Thread:
    """Run ``action`` in a thread once ``broker`` has ``subscribers`` subscribers (a long-poll
    or stream is waiting); join the returned thread."""

    def run():
        wait_until(lambda: broker.subscribers() >= subscribers, what="a waiting subscriber")
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread
