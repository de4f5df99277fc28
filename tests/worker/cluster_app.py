"""tests.apps.basic's task types on a Redis Cluster, for worker and sweeper processes
(``--app tests.worker.cluster_app:engine``, GHOSTLESS_REDIS_URL ``redis+cluster://...``), plus
``relay`` and ``post`` on queues of other shards than basic's ``work`` (under the 3-master slot
split of tests/support/cluster.py).
"""

from __future__ import annotations

import os

from ghostless import Engine
from tests.apps import basic
from tests.support.apps import lazy_engine

MAIL, OTHER = "mail", "other"  # slots 4247 and 11361 (shards 0 and 2); basic's "work": 6132 (shard 1)


def register_others(engine: Engine, lease: float = basic.LEASE) -> Engine:
    """The types of this app's other queues."""

    def relay(ctx, tag=""):
        basic.note(ctx, "start")
        return {"queue": MAIL, "tag": tag, "pid": os.getpid()}

    def post(ctx, tag=""):
        basic.note(ctx, "start")
        return {"queue": OTHER, "tag": tag, "pid": os.getpid()}

    engine.task(queue=MAIL, lease=lease, timeout=60)(relay)
    engine.task(queue=OTHER, lease=lease, timeout=60)(post)
    return engine


def register(engine: Engine, lease: float = basic.LEASE) -> Engine:
    return register_others(basic.register(engine, lease=lease), lease=lease)


app_engine, __getattr__ = lazy_engine(lambda: register_others(basic.app_engine()))  # GHOSTLESS_REDIS_URL
