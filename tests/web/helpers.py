"""Tasks in a given state for web tests (owned by alice unless told), made through the engine."""
from __future__ import annotations

import threading

from engine import Engine, State
from tests.support.wait import wait_for_server_time, wait_until

GHOST = "images.0123456789abcdef0123"  # well-formed, never created


def task_in(engine: Engine, state: State, owner: str = "alice", type: str = "render"):
    """A task of ``owner`` in ``state`` (TIMEOUT uses the ``brief`` type, whose attempt times out)."""
    task = engine.submit("brief" if state == State.TIMEOUT else type, {} if state == State.TIMEOUT
                         else {"prompt": "a cat"}, owner=owner)
    if state == State.PENDING:
        return task
    lease = engine.claim(task.id, "w1")
    if state == State.SUCCESS:
        engine.complete(lease, {"url": "s3://cat"})
    elif state == State.FAILED:
        engine.fail(lease, "boom", "it broke", retryable=False)
    elif state == State.RETRY_WAITING:
        engine.fail(lease, "boom", "flaky")
    elif state == State.TIMEOUT:
        wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
        assert engine.sweep().timed_out == 1
    elif state == State.CANCELLED:
        engine.cancel(task.id, by=owner)
    assert engine.get(task.id).status == state
    return engine.get(task.id)


def when_subscribed(broker, action, subscribers: int = 1) -> threading.Thread:
    """Run ``action`` in a thread once ``broker`` has ``subscribers`` subscribers (a long-poll
    or stream is waiting); join the returned thread."""
    def run():
        wait_until(lambda: broker.subscribers() >= subscribers, what="a waiting subscriber")
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread
