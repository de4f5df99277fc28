"""Every error is JSON: ``{"error": {"code": ..., "message": ...}}`` with a 4xx status.

Engine refusals map to statuses here, once. An unexpected exception is logged and
answered with a 500 in the same shape (the tests fuzz inputs to show none produces one);
an unreachable Redis is a 503 ``unavailable``, a full one (writes refused) a 503 ``redis_full``,
both with Retry-After.
"""

from __future__ import annotations

import logging
import math
import re

import redis
from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from ghostless.core.errors import (
    BadArgs,
    IdempotencyConflict,
    IllegalTransition,
    QuotaExceeded,
    RedisFull,
    TaskNotFound,
    UnknownTaskType,
)

log = logging.getLogger("ghostless.web")
QUOTA_RETRY_AFTER = 10  # s: Retry-After of a quota that waits for tasks to end, not for time
FULL_RETRY_AFTER = 30  # seconds: a full Redis needs an operator (or retention) to free memory


class ApiError(Exception):
    """An error answered as JSON with ``status``."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_response(status: int, code: str, message: str, headers: dict | None = None):
    response = jsonify(error={"code": code, "message": message})
    response.status_code = status
    response.headers.update(headers or {})
    return response


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def api_error(e: ApiError):
        return error_response(e.status, e.code, e.message, e.headers)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException):
        headers = {k: v for k, v in e.get_headers() if k.lower() in ("allow", "www-authenticate", "retry-after")}
        return error_response(e.code or 500, _snake(e.name), e.description or e.name, headers)

    @app.errorhandler(TaskNotFound)
    def not_found(e: TaskNotFound):
        return error_response(404, "not_found", "task not found")

    @app.errorhandler(IllegalTransition)
    def illegal(e: IllegalTransition):
        return error_response(409, "illegal_transition", f"cannot {e.verb} a task in state {e.state}")

    @app.errorhandler(IdempotencyConflict)
    def conflict(e: IdempotencyConflict):
        return error_response(409, "idempotency_conflict", "this idempotency key was used with other arguments")

    @app.errorhandler(UnknownTaskType)
    def unknown_type(e: UnknownTaskType):
        return error_response(400, "unknown_task_type", str(e))

    @app.errorhandler(BadArgs)
    def bad_args(e: BadArgs):
        return error_response(400, "invalid_args", str(e))

    @app.errorhandler(QuotaExceeded)
    def over_quota(e: QuotaExceeded):
        wait = math.ceil(e.retry_after) if e.retry_after is not None else QUOTA_RETRY_AFTER
        why = {
            "rate": "too many submits",
            "max_unfinished": "too many unfinished tasks",
            "max_unfinished_bytes": "too many bytes of args in unfinished tasks",
        }.get(e.limit, e.limit)
        return error_response(
            429,
            "quota_exceeded",
            f"quota exceeded in queue {e.queue}: {why}; retry later",
            {"Retry-After": str(max(1, wait))},
        )

    @app.errorhandler(RedisFull)
    @app.errorhandler(redis.exceptions.OutOfMemoryError)
    def full(e):
        log.error("Redis full, write refused: %s", e)
        return error_response(
            503,
            "redis_full",
            "the task store is full and refuses changes; try again later",
            {"Retry-After": str(FULL_RETRY_AFTER)},
        )

    @app.errorhandler(redis.ConnectionError)
    @app.errorhandler(redis.TimeoutError)
    def unavailable(e):
        log.error("Redis unavailable: %s", e)
        return error_response(503, "unavailable", "the task store is unavailable; try again", {"Retry-After": "5"})

    @app.errorhandler(Exception)
    def unexpected(e: Exception):
        log.exception("unexpected error")  # noqa: LOG004 - Flask calls error handlers inside its except
        return error_response(500, "internal_error", "internal error (logged)")
