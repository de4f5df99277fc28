"""Probes for load balancers and orchestrators (no authentication, nothing about tasks)."""

from __future__ import annotations

import logging

import redis
from flask import Blueprint, jsonify

from ghostless.core.app import AppError
from ghostless.core.lua_source import script_shas

from .deps import get_engine
from .errors import error_response

bp = Blueprint("health", __name__)
log = logging.getLogger("ghostless.web")


@bp.get("/healthz")
def healthz():
    """The process is up and serving requests."""
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz():
    """Redis answers and has every engine script cached (SCRIPT EXISTS). Scripts missing after
    a Redis restart or SCRIPT FLUSH are loaded here, as EVALSHA's NOSCRIPT fallback would do on
    first use; 503 when Redis cannot be reached or a script cannot be loaded, and 503
    ``redis_data_lost`` once this process has seen Redis lose its data (engine/core/epoch.py: the data
    epoch marker vanished or changed), until it is restarted."""
    try:
        engine = get_engine()
        engine.redis.ping()
        loaded = engine.scripts.ensure_loaded()
        engine.data_epoch.adopt()  # the first look of this process; later ones verify
    except (redis.RedisError, RuntimeError, AppError) as e:
        log.warning("not ready: %s", e)
        return error_response(503, "not_ready", f"Redis is not ready: {e}"[:300])
    if engine.data_epoch.lost:
        return error_response(503, "redis_data_lost", engine.data_epoch.lost)
    return jsonify(status="ok", scripts=len(script_shas()), loaded_now=loaded)
