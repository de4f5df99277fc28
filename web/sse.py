"""Server-Sent Events: one task's live timeline, and a feed of all the caller's tasks.

``GET /api/tasks/<id>/events``: a ``snapshot`` event (the task and its history), then one
event per transition, stage, progress report (and refused stale call) of the task, each
with its queue stream id as SSE ``id``; the stream ends after a terminal state. With
``Last-Event-ID`` (or ``?last_event_id=``) it replays what came after that id instead of a
snapshot, then goes live: nothing is lost or repeated.

``GET /api/events``: every event of the caller's tasks (an admin's: all), across queues.
Its SSE id is a composite position over the queue streams (web/positions.py). It starts
with a ``ready`` event carrying the starting position.

Views only check access and set headers; a stream's body (web/eventstream.py) reads live
events from the process's broker (web/broker.py) after its opening (the snapshot, or the replay
from the queue streams); its cleanup runs when the server closes it.
"""

from __future__ import annotations

import logging
from functools import partial

import redis
from flask import Blueprint, Response, current_app, g, request

from . import queries as wq
from .api import task_json
from .auth import require_user, stream_credential
from .deps import get_broker, get_engine, get_guard, get_replays
from .errors import ApiError
from .eventstream import EventStream, event_message, format_comment, format_event, parsed_id
from .held import STREAM, busy_retry_ms, held
from .positions import Positions
from .replay import Replays

bp = Blueprint("sse", __name__, url_prefix="/api")
log = logging.getLogger("ghostless.web")


@bp.before_request
def _authenticate():
    g.caller = require_user()


def _last_event_id() -> str | None:
    return request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or None


def _stream(body, passthrough: bool = False) -> Response:
    """An SSE response of ``body`` (strs; ``passthrough``: an EventStream, read by the server as it is)."""
    return Response(
        body,
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        direct_passthrough=passthrough,
    )


def retry_later(why: str) -> Response:
    """The refusal EventSource survives: 200, a comment saying ``why``, ``retry:`` (come back in
    GHOSTLESS_BUSY_RETRY_MS) and the end. Any non-200 status would make it give up for good."""
    return _stream([format_comment(why), format_event(retry=busy_retry_ms())])


@bp.errorhandler(redis.ConnectionError)
@bp.errorhandler(redis.TimeoutError)
def _redis_unavailable(e):
    """Redis unreachable, slow, or the web's pool busy past its wait (web/pool.py) while a stream
    opens (its credential check included): come back later, as from a cap."""
    log.warning("stream refused, to be retried: Redis unavailable: %s", e)
    return retry_later("unavailable: the task store did not answer in time, retrying later")


def _held_stream(open_stream) -> Response:
    """The stream ``open_stream(watch)`` opens, holding one of the caller's stream slots until its
    response closes. ``open_stream`` does the opening reads and returns its EventStream, or
    raises (an ApiError: its answer; Redis unavailable: ``retry_later``); the stream hands its
    subscriber to ``watch`` (web/guard.py ends it when the client leaves or the credential goes).
    Past a cap (web/held.py) it is not called: a ``retry_later`` answer, before any Redis work."""
    release = held().acquire(STREAM, g.caller.name)
    if release is None:
        return retry_later("busy: too many open streams, retrying later")
    try:
        events = open_stream(_watcher(get_guard(), request.environ, stream_credential()))
    except BaseException:
        release()
        raise
    events.on_close.append(release)  # its close runs also when the stream never started
    return _stream(events, passthrough=True)


def _settings() -> tuple[float, int]:
    return current_app.config["GHOSTLESS_SSE_KEEPALIVE"], current_app.config["GHOSTLESS_SSE_RETRY_MS"]


@bp.get("/tasks/<task_id>/events")
def task_events(task_id: str):
    last = _last_event_id()
    last = last if wq.parse_stream_id(last) is not None else None
    owner = None if g.caller.admin else g.caller.name

    def open_stream(watch):
        engine, broker = get_engine(), get_broker()
        opened = open_task(engine, broker, task_id, owner)
        if opened is None:
            raise ApiError(404, "not_found", "task not found")
        return task_stream(
            engine, broker, task_id, last, *_settings(), watch=watch, opened=opened, replays=get_replays()
        )

    return _held_stream(open_stream)


def open_task(engine, broker, task_id: str, owner: str | None):
    """(subscriber, task, history, position) of a task stream opening now, or None (unsubscribed)
    when there is no such task of ``owner``'s (None: anyone's). Subscribed first: an event newer
    than the snapshot's position is in the buffer. One Redis read (the snapshot script)."""
    sub = broker.subscribe(task_id=task_id, ticked=True)
    try:
        task, history, position = wq.snapshot(engine, task_id, owner)
    except BaseException:
        broker.unsubscribe(sub)
        raise
    if task is None:
        broker.unsubscribe(sub)
        return None
    return sub, task, history, position


def task_stream(
    engine,
    broker,
    task_id: str,
    last_id: str | None,
    keepalive: float,
    retry_ms: int,
    watch=None,
    opened=None,
    replays: Replays | None = None,
) -> EventStream:
    """Snapshot (or replay after ``last_id``), then live events until a terminal state; ends early
    when its subscriber is ended (``watch(sub)``: web/guard.py, when the client leaves or its
    credential goes). ``opened``: what ``open_task`` returned (else it opens here, anyone's task).
    ``replays``: the process's (web/replay.py), shared by every resuming stream (else its own).
    Its close unwatches and unsubscribes."""
    sub = opened[0] if opened else broker.subscribe(task_id=task_id, ticked=True)
    opening = _task_opening(engine, task_id, last_id, retry_ms, opened, replays or Replays(engine))
    return _events(broker, sub, opening, keepalive, watch, until=wq.is_terminal)


def _events(broker, sub, opening, keepalive: float, watch, until=None) -> EventStream:
    """``sub``'s stream after ``opening``, watched (``watch(sub)``) until its close, which also
    unsubscribes it (as does a failed ``watch``)."""
    try:
        unwatch = watch(sub) if watch else _nothing
    except BaseException:
        broker.unsubscribe(sub)
        raise
    return EventStream(sub, opening, keepalive, until, (unwatch, partial(broker.unsubscribe, sub)))


def _task_opening(engine, task_id: str, last_id: str | None, retry_ms: int, opened, replays: Replays):
    """A task stream's first messages (the retry hint with the snapshot in one write, as a first
    opening has nothing to replay), then its live ``render`` or None (it ends there)."""
    hint = format_event(retry=retry_ms)
    if opened is None or last_id is not None:  # Redis reads to come: the hint goes first, whatever they do
        yield hint
        hint = ""
    task, history, position = opened[1:] if opened else wq.snapshot(engine, task_id)
    if task is None:
        if hint:
            yield hint
        return None
    # A snapshot when the client has nothing, may have missed trimmed events, or names an
    # event this stream has not written yet (not an id we sent): replaying from it would
    # skip every event up to that id, the terminal one included.
    # So also for an id older than the task (not one of its stream's: its whole history is in a
    # snapshot), which would make the queue's replay read every event since then.
    replay = None
    if last_id is not None and _resumable(task, last_id, position):
        replay = replays.messages(task.queue, task_id, last_id, position)
    if replay is None:
        yield hint + format_event(
            position, "snapshot", {"task": task_json(task), "history": [e.to_dict() for e in history]}
        )
        last_id = None  # the snapshot is where this client is now
    else:
        for message, ends in replay:
            yield message
            if ends:
                return None
    if task.terminal:
        return None
    sent = max(wq.parse_stream_id(position), wq.parse_stream_id(last_id or "0-0"))

    def render(ev: dict) -> str | None:
        nonlocal sent
        sid = parsed_id(ev)
        if sid <= sent:
            return None
        sent = sid
        return event_message(ev["stream_id"], ev)

    return render


def _resumable(task, last_id: str, position: str) -> bool:
    """Whether ``last_id`` is an id this task's stream may have sent: at most the snapshot's
    ``position``, and not older than the task (its submit's event came at its creation)."""
    last = wq.parse_stream_id(last_id)
    born = round(task.created_at * 1000) if task.created_at is not None else 0
    return last <= wq.parse_stream_id(position) and last[0] >= born


@bp.get("/events")
def all_events():
    owner = None if g.caller.admin else g.caller.name

    def open_stream(watch):
        engine, broker = get_engine(), get_broker()
        positions = Positions.parse(_last_event_id())
        if positions is not None and positions.later_than(wq.server_ms(engine.redis)):
            positions = None  # not an id we sent: start afresh rather than skip events until then
        return feed_stream(engine, broker, owner, positions, *_settings(), watch=watch)

    return _held_stream(open_stream)


def feed_stream(
    engine,
    broker,
    owner: str | None,
    positions: Positions | None,
    keepalive: float,
    retry_ms: int,
    watch=None,
) -> EventStream:
    """Every event of ``owner``'s tasks (all with None), replayed after ``positions``, then live;
    ends early when its subscriber is ended (``watch(sub)``, as ``task_stream``)."""
    sub = (
        broker.subscribe(everything=True, ticked=True) if owner is None else broker.subscribe(owner=owner, ticked=True)
    )
    return _events(broker, sub, _feed_opening(engine, owner, positions, retry_ms), keepalive, watch)


def _feed_opening(engine, owner: str | None, positions: Positions | None, retry_ms: int):
    yield format_event(retry=retry_ms)
    if positions is None:
        positions = Positions(wq.server_ms(engine.redis))
        yield format_event(str(positions), "ready", {"owner": owner, "position": str(positions)})
    else:
        for queue in engine.queues():
            for ev in wq.read_stream(engine, queue, positions.start(queue)):
                if owner is None or ev["owner"] == owner:
                    positions.advance(queue, ev["stream_id"])
                    yield format_event(str(positions), ev["kind"], ev)

    def render(ev: dict) -> str | None:
        if not positions.take(ev["queue"], ev["stream_id"], parsed_id(ev)):
            return None
        return event_message(str(positions), ev)

    return render


CREDENTIAL_CHECK = 2.0  # s: an open stream ends this soon after its token is revoked or its session ends


def _nothing() -> None:
    pass


def _watcher(guard, environ: dict, credential: tuple[str, str | None]):
    """``watch(sub)``: the guard watches ``sub``'s client and credential; returns the unwatch."""

    def watch(sub):
        return partial(guard.unwatch, guard.watch(sub, environ, credential))

    return watch
