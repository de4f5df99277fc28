"""The pages people watch: dashboard, task list, task page (server-rendered HTML).

Every page reads without JavaScript; static/app.js makes them live: it listens to the SSE
streams (``/api/events``, ``/api/tasks/<id>/events``) and, on each event, swaps in a
freshly rendered panel (``/dashboard/live``, ``/tasks/<id>/panel``), so the text a person
reads is written once, here and in the templates. The dashboard also polls its panel for
what the streams do not carry (workers, breakers).

A caller without a session (or bearer token) is sent to ``/login``. A user sees only their
own tasks: another user's task page is a 404 exactly like a missing one, and the list and
panels show none of theirs. Admins see every task and get the admin controls
(web/admin.py). Pages send a strict Content-Security-Policy: no inline script or style,
nothing from another origin.
"""

from __future__ import annotations

import json

from flask import Blueprint, current_app, g, redirect, render_template, request, session, url_for

from ghostless.core.clock import server_ms
from ghostless.core.states import State

from . import dashboard as dash
from .auth import current_user
from .deps import get_engine
from .errors import ApiError
from .friendly import clock, describe, duration, iso, ordinal, stage_label, without_bidi

bp = Blueprint("pages", __name__)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
STATUSES = [s.value for s in State]
PAGE_SIZE = 50


@bp.before_request
def _authenticate():
    g.caller = current_user()
    if g.caller is None:
        if request.endpoint in ("pages.dashboard_live", "pages.task_panel"):
            raise ApiError(401, "unauthorized", "log in again")
        target = request.path + (f"?{request.query_string.decode()}" if request.query_string else "")
        return redirect(url_for("auth.login_page", next=target), code=303)


@bp.after_request
def _headers(response):
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")
    return response


@bp.errorhandler(ApiError)
def _error_page(e: ApiError):
    headers = {k: v for k, v in e.headers.items() if k.lower() != "www-authenticate"}
    return render_template("error.html", status=e.status, message=e.message), e.status, headers


@bp.record_once
def _template_helpers(state):
    """Globals (not a context processor) so that imported macros see them too; every value a
    template prints passes ``without_bidi`` (set before any template is compiled)."""
    state.app.jinja_env.finalize = without_bidi
    state.app.jinja_env.globals.update(
        iso=iso,
        clock=clock,
        duration=duration,
        ordinal=ordinal,
        stage_label=stage_label,
        state_class=dash.state_class,
        event_text=dash.event_text,
        csrf_token=_csrf,
    )


def _csrf() -> str:
    """The session's CSRF token for the page's scripts ("" for a bearer caller: none needed)."""
    return session.get("csrf", "") if g.get("auth") == "cookie" else ""


def _owner() -> str | None:
    return None if g.caller.admin else g.caller.name


# -- dashboard ----------------------------------------------------------------------------------------
def _dashboard_data() -> dict:
    app = current_app
    cache = app.extensions.get("ghostless.dashboard")
    if cache is None:
        cache = app.extensions.setdefault(
            "ghostless.dashboard", dash.SharedCache(app.config["GHOSTLESS_DASHBOARD_CACHE"])
        )
    return dash.gather(get_engine(), cache, g.caller.admin, _owner(), app.config["GHOSTLESS_STUCK_AFTER"])


@bp.get("/")
def dashboard():
    engine = get_engine()
    return render_template(
        "dashboard.html", user=g.caller, d=_dashboard_data(), types=sorted(t.name for t in engine.registry)
    )


@bp.get("/dashboard/live")
def dashboard_live():
    """The dashboard's live panels alone (the page swaps them in on events and every few seconds)."""
    return render_template("_dashboard_live.html", user=g.caller, d=_dashboard_data())


# -- task list ----------------------------------------------------------------------------------------
@bp.get("/tasks")
def task_list():
    engine = get_engine()
    f = {name: (request.args.get(name) or "").strip() for name in ("status", "type", "queue", "owner")}
    if f["status"] and f["status"] not in STATUSES:
        raise ApiError(400, "invalid", f"status must be one of {', '.join(STATUSES)}")
    owner = _owner() if not g.caller.admin else (f["owner"] or None)
    limit = request.args.get("limit", str(PAGE_SIZE))
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= 200:
        raise ApiError(400, "invalid", "limit must be an integer within 1..200")
    try:
        tasks, cursor = engine.list_tasks(
            owner=owner,
            status=f["status"] or None,
            type=f["type"] or None,
            queue=f["queue"] or None,
            limit=int(limit),
            cursor=request.args.get("cursor") or None,
        )
    except ValueError as e:
        raise ApiError(400, "invalid", str(e)) from None
    filters = {k: v for k, v in f.items() if v and (k != "owner" or g.caller.admin)}
    if limit != str(PAGE_SIZE):
        filters["limit"] = limit
    next_url = url_for("pages.task_list", cursor=cursor, **filters) if cursor else None
    return render_template(
        "tasks.html",
        user=g.caller,
        tasks=tasks,
        f=f,
        next_url=next_url,
        first_url=url_for("pages.task_list", **filters) if request.args.get("cursor") else None,
        statuses=STATUSES,
        types=sorted(t.name for t in engine.registry),
        queues=engine.queues(),
    )


# -- one task -----------------------------------------------------------------------------------------
def _task_view(task_id: str) -> dict:
    """The task (404 when missing or another owner's) with its history and status words."""
    engine = get_engine()
    task = engine.get(task_id, owner=_owner())
    if task is None:
        raise ApiError(404, "not_found", "task not found")
    now = server_ms(engine.redis) / 1000
    draining = not task.terminal and task.queue in engine.draining()
    history = engine.history(task_id)
    return {
        "task": task,
        "history": list(reversed(history)),
        "status": describe(task, now, draining),
        "now": now,
        "user": g.caller,
    }


@bp.get("/tasks/<task_id>")
def task_page(task_id: str):
    view = _task_view(task_id)
    task = view["task"]
    args_json = json.dumps(task.args if task.args is not None else {}, indent=2, sort_keys=True)
    return render_template(
        "task.html",
        args_json=args_json,
        result_json=json.dumps(task.result, indent=2, sort_keys=True) if task.result is not None else None,
        **view,
    )


@bp.get("/tasks/<task_id>/panel")
def task_panel(task_id: str):
    """The task page's live part alone (status, progress, actions, timeline)."""
    return render_template("_task_panel.html", **_task_view(task_id))
