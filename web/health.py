"""Probes for load balancers and orchestrators (no authentication, nothing about tasks).

``GHOSTLESS_READY_SWEEPER_AGE`` (seconds, default 30; also from the environment): ``/readyz`` is
ready only while some sweeper has ticked within that many seconds (engine/core/sweepers.py). A
deployment where no sweeper has ever run is not ready: without one, lapsed leases are never
reclaimed and retries never come due. 0 turns the check off.
"""

from __future__ import annotations

import logging

import redis
from flask import Blueprint, current_app, jsonify

from ghostless.core.app import AppError
from ghostless.core.lua_source import SCRIPTS
from ghostless.core.sweepers import freshest_age

from .deps import get_engine
from .errors import error_response

bp = Blueprint("health", __name__)
DEFAULTS = {"GHOSTLESS_READY_SWEEPER_AGE": 30.0}
log = logging.getLogger("ghostless.web")


@bp.get("/healthz")
def healthz():
    """The process is up and serving requests."""
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz():
    """Redis answers and has every engine script loaded (as a function, or in its script cache).
    Scripts missing after a restart that lost them, FUNCTION FLUSH or SCRIPT FLUSH are loaded here,
    as a call would load its own on first use; 503 when Redis cannot be reached or a script cannot
    be loaded, and 503
    ``redis_data_lost`` once this process has seen Redis lose its data (engine/core/epoch.py: the data
    epoch marker vanished or changed), until it is restarted. Then 503 ``no_sweeper`` unless a
    sweeper ticked within ``GHOSTLESS_READY_SWEEPER_AGE`` seconds (none ever ran counts as none)."""
    limit = current_app.config["GHOSTLESS_READY_SWEEPER_AGE"]
    try:
        engine = get_engine()
        engine.redis.ping()
        loaded = engine.scripts.ensure_loaded()
        engine.data_epoch.adopt()  # the first look of this process; later ones verify
        age = freshest_age(engine) if limit else None
    except (redis.RedisError, RuntimeError, AppError) as e:
        log.warning("not ready: %s", e)
        return error_response(503, "not_ready", f"Redis is not ready: {e}"[:300])
    if engine.data_epoch.lost:
        return error_response(503, "redis_data_lost", engine.data_epoch.lost)
    if limit and (age is None or age > limit):
        seen = "no sweeper has ever ticked" if age is None else f"the last sweeper tick was {age:.1f} s ago"
        log.warning("not ready: %s (GHOSTLESS_READY_SWEEPER_AGE %g s)", seen, limit)
        return error_response(503, "no_sweeper", f"{seen} (limit {limit:g} s): start `ghostless sweeper`")
    return jsonify(status="ok", scripts=len(SCRIPTS), loaded_now=loaded, sweeper_age=age)
