"""An in-memory executor for the engine's dispatch hook (engine/core/dispatch.py protocol)."""

from __future__ import annotations

from collections import deque


class FakeDispatcher:
    """Records every job it is handed; a test can lose one to play a crashed executor."""

    active = True

    def __init__(self):
        self.jobs: dict[str, str] = {}  # live jobs: dispatch id -> task id
        self.enqueued: list[tuple[str, str, str]] = []  # every enqueue: (task id, queue, dispatch id)
        self.line: deque[tuple[str, str]] = deque()  # (task id, dispatch id) in the order RQ hands them out
        self.at_front: set[str] = set()  # dispatch ids enqueued at the front of the line
        self.timeouts: dict[str, float] = {}  # dispatch id -> the job's timeout

    def enqueue(self, task_id: str, queue: str, dispatch_id: str, timeout: float, at_front: bool = False) -> None:
        self.jobs[dispatch_id] = task_id
        self.enqueued.append((task_id, queue, dispatch_id))
        self.timeouts[dispatch_id] = timeout
        if at_front:
            self.at_front.add(dispatch_id)
            self.line.appendleft((task_id, dispatch_id))
        else:
            self.line.append((task_id, dispatch_id))

    def next_job(self) -> tuple[str, str]:
        """The job a worker would take next, as RQ hands them out: (task id, dispatch id)."""
        return self.line.popleft()

    def job_exists(self, dispatch_id: str, queue: str | None = None) -> bool:
        return dispatch_id in self.jobs

    def lose(self, dispatch_id: str) -> None:
        del self.jobs[dispatch_id]

    def dispatches(self, task_id: str) -> list[str]:
        """Dispatch ids made for ``task_id``, oldest first."""
        return [d for t, _, d in self.enqueued if t == task_id]
