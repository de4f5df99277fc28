"""Helpers of the execution tests: reading what tasks did, waiting for states."""

from __future__ import annotations

import json

from ghostless import Backoff, Engine, PermanentError, State
from ghostless.core.streams import read_stream
from tests.apps import basic
from tests.support.procs import Proc
from tests.support.snapshots import task_snapshot
from tests.support.wait import wait_until

NS = "wt"  # key namespace of every execution test
LEASE = 1.5  # every basic type's heartbeat lease (renewed every 0.5 s); also the runner's grace
OWNER = "alice"


def registered(worker_class, connection, name: str):
    """An in-process worker of ``worker_class`` (an RQ worker with ghostless's mixins) on queue
    ``q``, registered in RQ's view as RQ registers one."""
    made = worker_class(["q"], connection=connection, name=name)
    made.register_birth()
    return made


def server_now(engine: Engine) -> float:
    """Redis server time in seconds (the clock of every recorded event)."""
    sec, usec = engine.redis.time()
    return int(sec) + int(usec) / 1e6


def side_log(engine: Engine, task_id: str) -> list[str]:
    """The task function's side-effect log: entries ``<attempt>:<what>:<pid>``."""
    return [e.decode() for e in engine.redis.lrange(f"log:{task_id}", 0, -1)]


def logged(engine: Engine, task_id: str, what: str) -> list[str]:
    return [e for e in side_log(engine, task_id) if e.split(":")[1] == what]


def wait_logged(engine: Engine, task_id: str, what: str, timeout: float = 10.0, count: int = 1) -> list[str]:
    return wait_until(
        lambda: len(logged(engine, task_id, what)) >= count and logged(engine, task_id, what),
        timeout,
        what=f"{what!r} x{count} in the side-effect log of {task_id}",
    )


def wait_status(engine: Engine, task_id: str, *states: State, timeout: float = 15.0):
    """Wait until the task is in one of ``states``; returns the Task."""

    def reached():
        task = engine.get(task_id)
        return task if task is not None and task.status in states else None

    try:
        return wait_until(reached, timeout, what=f"{task_id} in {[s.value for s in states]}")
    except AssertionError:
        task = engine.get(task_id)
        raise AssertionError(
            f"{task_id} is {task.status.value if task else 'gone'}, waited for "
            f"{[s.value for s in states]}; history: {verbs(engine, task_id)}"
        ) from None


def wait_terminal(engine: Engine, task_id: str, timeout: float = 15.0):
    return wait_status(engine, task_id, *(s for s in State if s.terminal), timeout=timeout)


def verbs(engine: Engine, task_id: str) -> list[str]:
    """The task's history as compact strings: ``verb:from->to[:reason]`` (stage entries ``stage:<name>``)."""
    out = []
    for e in engine.history(task_id):
        if e.kind == "stage":
            out.append(f"stage:{e.stage}")
        elif e.kind == "stale":
            out.append(f"stale:{e.verb}")
        else:
            out.append(f"{e.verb}:{e.from_}->{e.to}" + (f":{e.reason}" if e.reason else ""))
    return out


def transitions(engine: Engine, task_id: str) -> list[str]:
    """``verbs`` without stage and stale entries."""
    return [v for v in verbs(engine, task_id) if not v.startswith(("stage:", "stale:"))]


def stream_events(engine: Engine, task_id: str, queue: str = basic.QUEUE) -> list[dict]:
    """The task's events in its queue's event stream, oldest first (engine/core/streams.py stream_event)."""
    return [ev for ev in read_stream(engine, queue, "-") if ev["task_id"] == task_id]


def horse_of(worker: Proc, timeout: float = 10.0) -> int:
    """The pid of a fork worker's work-horse (waits until there is one)."""
    return wait_until(lambda: (worker.children() or [None])[0], timeout, what=f"a work-horse of {worker.pid}")


def raw_result(engine: Engine, task_id: str):
    """The result as stored in the task's body (None when there is none)."""
    raw = task_snapshot(engine, task_id)["result"]
    return None if raw is None else json.loads(raw)


def status_engine(redis_server):
    """An engine in namespace ``st`` on a flushed ``redis_server``, queue ``status``: ``fine``
    succeeds, ``flaky`` raises KeyError (2 attempts, 600 s apart), ``hopeless`` a PermanentError."""
    client = redis_server.client()
    client.flushall()
    engine = Engine(client, namespace="st")

    @engine.task(queue="status", lease=30)
    def fine(ctx):
        return {"ok": True}

    @engine.task(queue="status", lease=30, max_attempts=2, backoff=Backoff.fixed([600]))
    def flaky(ctx):
        raise KeyError("missing input")

    @engine.task(queue="status", lease=30, max_attempts=3)
    def hopeless(ctx):
        raise PermanentError("no such model", kind="bad_model")

    return engine
