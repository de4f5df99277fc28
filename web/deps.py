"""The one accessor for the engine, the SSE broker, the stream guard and the replays of an app
(as flaskr's ``get_db``).

Both are made once per app (per process), on first use: the engine from
``GHOSTLESS_ENGINE`` or else the app named by ``GHOSTLESS_APP``, read through the web's own
bounded Redis pool (web/pool.py); the broker's reader
thread starts with its first subscriber, so a process that serves no stream runs none
(and gunicorn workers start theirs after the fork).
"""

from __future__ import annotations

import threading

from flask import Flask, current_app

from ghostless.core.app import load_app
from ghostless.core.engine import Engine

from .broker import Broker
from .guard import StreamGuard
from .pool import bounded_engine
from .replay import Replays

TICK = 1.0  # s: the broker's ticker wakes the streams due for a keep-alive this often
MIN_TICK = 0.01  # s: however short the keep-alive interval (0 included), the ticker never spins


class Deps:
    def __init__(self, app: Flask):
        self.config = app.config
        self._engine: Engine | None = None
        self._broker: Broker | None = None
        self._guard: StreamGuard | None = None
        self._replays: Replays | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = self.config.get("GHOSTLESS_ENGINE")
                    if engine is None:
                        engine = load_app(self.config.get("GHOSTLESS_APP"))
                    self._engine = bounded_engine(
                        engine,
                        self.config["GHOSTLESS_REDIS_CONNECTIONS"],
                        self.config["GHOSTLESS_REDIS_WAIT"],
                        self.config["GHOSTLESS_REDIS_BATCH"],
                    )
        return self._engine

    @property
    def broker(self) -> Broker:
        return self._once(
            "_broker",
            lambda engine: Broker(
                engine,
                block_ms=self.config["GHOSTLESS_BROKER_BLOCK_MS"],
                limit=self.config["GHOSTLESS_SSE_BUFFER"],
                # a stream's keep-alive comes up to this late: at most a second, or half the interval
                tick=max(MIN_TICK, min(TICK, self.config["GHOSTLESS_SSE_KEEPALIVE"] / 2)),
            ),
        )

    @property
    def guard(self) -> StreamGuard:
        return self._once("_guard", StreamGuard)

    @property
    def replays(self) -> Replays:
        return self._once("_replays", Replays)

    def _once(self, attr: str, make):
        """The per-process object in ``attr``, made by ``make(engine)`` on first use."""
        if getattr(self, attr) is None:
            engine = self.engine
            with self._lock:
                if getattr(self, attr) is None:
                    setattr(self, attr, make(engine))
        return getattr(self, attr)

    def close(self) -> None:
        """Stop the broker's reader and the stream guard (tests; a process that exits needs nothing)."""
        if self._broker is not None:
            self._broker.close()
        if self._guard is not None:
            self._guard.close()


def init_app(app: Flask) -> None:
    app.extensions["ghostless"] = Deps(app)


def deps() -> Deps:
    return current_app.extensions["ghostless"]


def get_engine() -> Engine:
    return deps().engine


def get_broker() -> Broker:
    return deps().broker


def get_guard() -> StreamGuard:
    return deps().guard


def get_replays() -> Replays:
    return deps().replays
