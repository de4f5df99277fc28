"""Admin-only operations: reclaim a stuck task now, retry a type's FAILED tasks, drain or resume a
queue. Each is one Engine call, recorded with the admin's name.

For anyone but an admin these endpoints do not exist: a user gets the same 404 as for an
unknown path (no caller at all: 401, as everywhere under /api). Cookie sessions need the
CSRF token, as every state change does.

| call | answer |
|---|---|
| ``POST /api/admin/tasks/<id>/reclaim`` | 200 ``{task, state}``; 409 unless PROCESSING |
| ``POST /api/admin/retry-failed`` ``{type, queue?}`` | 200 ``{type, retried}`` |
| ``POST /api/admin/queues/<queue>/drain`` / ``.../resume`` | 200 ``{queue, draining}`` |
"""

from __future__ import annotations

from flask import Blueprint, g, jsonify, request
from werkzeug.exceptions import NotFound

from ghostless.core.errors import GhostlessError

from .api import task_json
from .auth import UNAUTHORIZED, current_user, require_user
from .bodies import json_body
from .deps import get_engine
from .errors import ApiError

bp = Blueprint("admin", __name__, url_prefix="/api/admin")
FIELDS = frozenset({"type", "queue"})


@bp.before_app_request  # app-wide: a wrong method (405) must not tell a non-admin the path exists
def _admins_only():
    if not request.path.startswith("/api/admin/"):
        return
    user = current_user()
    if user is None:
        raise ApiError(401, "unauthorized", "authentication required: a bearer token or a login session", UNAUTHORIZED)
    if not user.admin:
        raise NotFound()  # answered exactly like an unknown path
    g.caller = require_user()  # the CSRF check of cookie sessions


def _queue(name: str) -> str:
    if name not in get_engine().queues():
        raise ApiError(404, "not_found", "no such queue")
    return name


@bp.post("/tasks/<task_id>/reclaim")
def reclaim(task_id: str):
    """Take a PROCESSING task from its worker now, as if its lease had lapsed."""
    json_body(required=False)
    engine = get_engine()
    state = engine.reclaim(task_id, by=g.caller.name)
    task = engine.get(task_id)
    if task is None:  # purged meanwhile
        raise ApiError(404, "not_found", "task not found")
    return jsonify(task=task_json(task), state=state.value)


@bp.post("/retry-failed")
def retry_failed():
    """Manual retry of every FAILED task of a type (optionally of one queue)."""
    body = json_body(fields=FIELDS)
    type_name, queue = body.get("type"), body.get("queue") or None
    if not isinstance(type_name, str) or not type_name:
        raise ApiError(400, "invalid", "type is required (a task type name)")
    if queue is not None:
        if not isinstance(queue, str):
            raise ApiError(400, "invalid", "queue must be a string")
        _queue(queue)
    try:
        count = get_engine().retry_failed(type_name, by=g.caller.name, queue=queue)
    except GhostlessError:
        raise
    except ValueError as e:
        raise ApiError(400, "invalid", str(e)) from None
    return jsonify(type=type_name, retried=count)


@bp.post("/queues/<queue>/drain")
def drain(queue: str):
    """Stop handing the queue's tasks to workers; running ones finish."""
    json_body(required=False)
    get_engine().drain(_queue(queue), True)
    return jsonify(queue=queue, draining=True)


@bp.post("/queues/<queue>/resume")
def resume(queue: str):
    """Hand the queue's tasks to workers again.

    Tasks that waited in PENDING while it drained are dispatched by the sweeper's next look
    at the dispatch set (their deadline has passed), not here.
    """
    json_body(required=False)
    get_engine().drain(_queue(queue), False)
    return jsonify(queue=queue, draining=False)
