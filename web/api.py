"""The JSON API: submit, list, read (with long-poll), cancel, edit, retry, stats.

Every call is authenticated (auth.require_user). A user sees and changes only their own
tasks; another user's task is a 404, exactly like a missing one. Admins see all. Owner
checks for cancel, edit and retry happen inside the Lua scripts.
"""

from __future__ import annotations

import math
import time

from flask import Blueprint, current_app, g, jsonify, request

from ghostless.core.errors import GhostlessError
from ghostless.core.models import Task
from ghostless.core.states import State

from . import queries as wq
from .auth import require_user
from .bodies import json_body
from .broker import Dropped
from .deps import get_broker, get_engine
from .errors import ApiError
from .held import CLIENT_CHECK, LONGPOLL, busy_retry_ms, client_gone, held
from .quotas import quota_for

bp = Blueprint("api", __name__, url_prefix="/api")

SUBMIT_FIELDS = frozenset({"type", "args", "idempotency_key", "priority", "delay", "expires_in"})
STATUSES = frozenset(s.value for s in State)


@bp.before_request
def _authenticate():
    g.caller = require_user()


def task_json(task: Task) -> dict:
    d = task.to_dict()
    d["terminal"] = task.terminal
    return d


def _owner_filter() -> str | None:
    """None (every owner) for admins, else the caller's name."""
    return None if g.caller.admin else g.caller.name


def _call(fn, *args, **kwargs):
    """An engine call whose ValueErrors (bad input) become 400s; its typed refusals are
    mapped by web/errors.py."""
    try:
        return fn(*args, **kwargs)
    except GhostlessError:
        raise
    except ValueError as e:
        raise ApiError(400, "invalid", str(e)) from None


def _text(name: str, value: object, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ApiError(400, "invalid", f"{name} must be a string")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ApiError(400, "invalid", f"{name} is not valid Unicode text") from None
    return value


def _number(name: str, low: float, high: float, integer: bool = False, default=None):
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ApiError(400, "invalid", f"{name} must be {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise ApiError(400, "invalid", f"{name} must be within {low:g}..{high:g}")
    return value


# -- tasks ------------------------------------------------------------------------------------------
@bp.post("/tasks")
def submit():
    body = json_body(fields=SUBMIT_FIELDS)
    engine = get_engine()
    type_name = _text("type", body.get("type"), optional=False)
    key = _text("idempotency_key", body.get("idempotency_key"))
    task = _call(
        engine.submit,
        type_name,
        body.get("args", {}),
        owner=g.caller.name,
        idempotency_key=key,
        priority=body.get("priority", 0),
        delay=body.get("delay", 0),
        expires_in=body.get("expires_in"),
        quota=quota_for(g.caller.name),
    )
    return jsonify(task=task_json(task)), 200 if task.replayed else 201


@bp.get("/tasks")
def list_tasks():
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        raise ApiError(400, "invalid", f"status must be one of {', '.join(sorted(STATUSES))}")
    owner = _owner_filter()
    if owner is None and request.args.get("owner"):
        owner = request.args["owner"]
    tasks, cursor = _call(
        get_engine().list_tasks,
        owner=owner,
        status=status,
        type=request.args.get("type") or None,
        queue=request.args.get("queue") or None,
        limit=_number("limit", 1, 500, integer=True, default=50),
        cursor=request.args.get("cursor") or None,
    )
    return jsonify(tasks=[task_json(t) for t in tasks], next_cursor=cursor)


@bp.get("/tasks/<task_id>")
def get_task(task_id: str):
    """The task with its history. With ``?wait=S[&version=N]``: long-poll, answering as soon
    as the task's version differs from N (default: its current one), or after S seconds."""
    wait = _number("wait", 0, math.inf)
    version = _number("version", 0, 2**62, integer=True)
    if wait:
        release = held().acquire(LONGPOLL, g.caller.name)
        if release is None:
            _version(task_id)  # a 404 stays a 404
            raise ApiError(
                429,
                "too_many_waits",
                "too many long-polls open: ask again after Retry-After seconds",
                {"Retry-After": str(max(1, math.ceil(busy_retry_ms() / 1000)))},
            )
        try:
            _wait_for_change(task_id, min(wait, current_app.config["GHOSTLESS_LONGPOLL_MAX"]), version)
        finally:
            release()
    return jsonify(_visible_snapshot(task_id))


def _visible_snapshot(task_id: str) -> dict:
    task, history, _ = wq.snapshot(get_engine(), task_id, owner=_owner_filter())
    if task is None:
        raise ApiError(404, "not_found", "task not found")
    return {"task": task_json(task), "history": [e.to_dict() for e in history]}


def _wait_for_change(task_id: str, wait: float, version: int | None) -> None:
    """Block until the task's version is not ``version``, or ``wait`` seconds pass.

    Waits on the process's SSE broker (no Redis call while waiting): subscribe first, then
    read the version, so a change between the two is in the buffer. Returns early once the
    client has closed its connection (looked at every CLIENT_CHECK seconds): its thread is free
    at once, not after ``wait``.
    """
    broker = get_broker()
    sub = broker.subscribe(task_id=task_id)
    try:
        current = _version(task_id)
        version = current if version is None else version
        deadline = time.monotonic() + wait
        while current == version:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                event = sub.next(min(remaining, CLIENT_CHECK))
            except Dropped:
                return
            if client_gone():
                return
            if event is not None and event.get("version") != current:
                current = _version(task_id)
    finally:
        broker.unsubscribe(sub)


def _version(task_id: str) -> int:
    task = get_engine().get(task_id, owner=_owner_filter())
    if task is None:
        raise ApiError(404, "not_found", "task not found")
    return task.version


@bp.post("/tasks/<task_id>/cancel")
def cancel(task_id: str):
    body = json_body(required=False)
    reason = _text("reason", body.get("reason")) or ""
    engine = get_engine()
    _call(engine.cancel, task_id, by=g.caller.name, admin=g.caller.admin, reason=reason)
    return jsonify(task=task_json(_require(task_id)))


@bp.post("/tasks/<task_id>/edit")
def edit(task_id: str):
    body = json_body()
    if "args" not in body:
        raise ApiError(400, "invalid", "args is required")
    # The caller's quota: an edit counts against its rate, its args against its bytes.
    task = _call(
        get_engine().edit, task_id, body["args"], by=g.caller.name, admin=g.caller.admin, quota=quota_for(g.caller.name)
    )
    return jsonify(task=task_json(task)), 201


@bp.post("/tasks/<task_id>/retry")
def retry(task_id: str):
    json_body(required=False)
    engine = get_engine()
    _call(engine.retry, task_id, by=g.caller.name, admin=g.caller.admin)
    return jsonify(task=task_json(_require(task_id)))


def _require(task_id: str) -> Task:
    task = get_engine().get(task_id)
    if task is None:  # purged between the change and this read
        raise ApiError(404, "not_found", "task not found")
    return task


# -- dashboard ----------------------------------------------------------------------------------------
@bp.get("/stats")
def stats():
    """Counts per queue and state, throughput per minute, stuck tasks (only the caller's,
    unless admin), RQ workers, circuit breakers, draining queues."""
    engine = get_engine()
    minutes = _number("minutes", 1, 60, integer=True, default=5)
    return jsonify(
        queues=engine.stats(),
        throughput=wq.throughput(engine, minutes),
        stuck=wq.stuck_tasks(engine, current_app.config["GHOSTLESS_STUCK_AFTER"], owner=_owner_filter()),
        workers=wq.workers(engine),
        breakers=engine.breakers(),
        draining=engine.draining(),
    )
