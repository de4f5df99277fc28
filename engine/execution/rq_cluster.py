"""RQ on a Redis Cluster: every RQ key of a ghostless queue's jobs in that queue's slot.

RQ itself assumes one Redis: its unique enqueue is one script over the job's hash and the queue's
list (``EVALSHA - all keys must map to the same key slot`` when they hash apart), and a worker
takes jobs with one BLPOP over all its lists. Here, on a Cluster:

- names carry the queue's hash tag (engine/core/keys.py): RQ queue ``gl.{images}``, job id
  ``images-<dispatch id>`` whose hash is ``rq:job:{images}-<dispatch id>`` (``ClusterJob``). So
  a queue's RQ lists, its registries (``rq:wip:gl.{images}``, ...) and its jobs' hashes and
  dependents share its slot with the queue's own keys, and queues spread across shards;
- RQ's pipelines on a ``RedisCluster`` are not transactions (redis-py splits them per node; their
  WATCH and MULTI are no-ops here: ``RQClusterConnection``), so its writes to global keys
  (``rq:queues``, ``rq:workers``, a worker's hash) next to per-queue keys work; the multi-key
  commands of RQ on ghostless's path are all over one job's or one queue's keys;
- a worker dequeues slot by slot (``ClusterQueue.lpop``): one look at the length of every list it
  serves (a pipeline: one round trip per node), then an LPOP of the first non-empty list in the
  worker's order (priority first, across queues). While all are empty it waits for the
  dispatcher's announcement of an enqueue (a PUBLISH on ``rq_wake_channel``) for at most
  ``WAKE_WAIT`` seconds, then looks again: a lost announcement delays a job by ``WAKE_WAIT`` at
  most. A worker whose lists all share one slot blocks in one BLPOP over all of them instead.

What stays outside a queue's slot: RQ's results stream and execution records of a job (keyed by
RQ from its job id alone, written in non-transactional pipelines) and the worker registry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis
from redis.cluster import RedisCluster, key_slot
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.worker import Worker

from ghostless.core.cluster import is_cluster as core_is_cluster
from ghostless.core.keys import rq_job_tagged

from .outage import RidingQueue

BLOCK_ONE = 2.0  # seconds a BLPOP waits when the worker's lists share one slot
WAKE_WAIT = 1.0  # seconds an idle worker on several slots waits for an announcement before it looks


def is_cluster(client) -> bool:
    """A Redis Cluster client, or RQ's connection over one."""
    return isinstance(client, RQClusterConnection) or core_is_cluster(client)


class RQClusterConnection:
    """A RedisCluster as RQ's connection: the client itself, but for its pipelines.

    A cluster pipeline is no transaction (redis-py splits it per node), and refuses WATCH and
    MULTI. RQ opens one with both around a job's outcome (``handle_job_success``: WATCH of the
    job's dependents, then MULTI over the job, its registries and the worker's counters, which no
    one slot holds). Here they guard nothing: between WATCH and MULTI commands run at once (as
    redis-py's pipeline does after WATCH: RQ reads the keys it watched), after MULTI they go as one
    non-transactional pipeline. What the WATCH guarded, RQ job dependencies, ghostless never uses
    (``ClusterQueue``).
    """

    def __init__(self, client: RedisCluster, wake_channel: str | None = None):
        self._client = self.__wrapped__ = client  # what ghostless.core.clients.client_like copies
        self.wake_channel = wake_channel
        self._waker = None

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def wait_for_wake(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for an enqueue's announcement on ``wake_channel``.

        Subscribed on first use and kept: an announcement made while the worker looks or runs a
        job waits in the subscription, and the next wait returns at once."""
        if self.wake_channel is None:
            time.sleep(timeout)
            return
        try:
            if self._waker is None:
                self._waker = self._client.pubsub()
                self._waker.subscribe(self.wake_channel)
            self._waker.get_message(ignore_subscribe_messages=True, timeout=timeout)
        except BaseException:
            self._drop_waker()
            raise

    def _drop_waker(self) -> None:
        waker, self._waker = self._waker, None
        if waker is not None:
            try:
                waker.close()
            except (OSError, redis.RedisError):  # a broken subscription: its connection is dropped either way
                pass

    def pipeline(self, transaction=None, shard_hint=None):
        pipe = self._client.pipeline()
        pipe.explicit_transaction = False
        pipe.watching = False
        buffer = pipe.execute_command

        def execute_command(*args, **options):
            # As a pipeline after WATCH and before MULTI: RQ reads what it watches at once
            # (StartedJobRegistry.cleanup -> Queue.enqueue_dependents: SMEMBERS of the dependents).
            if pipe.watching and not pipe.explicit_transaction:
                return self._client.execute_command(*args, **options)
            return buffer(*args, **options)

        def watch(*names) -> None:
            pipe.watching = True

        def unwatch(*names) -> None:
            pipe.watching = False

        def multi() -> None:
            pipe.explicit_transaction = True

        reset = pipe.reset

        def reset_all() -> None:
            reset()
            pipe.watching = pipe.explicit_transaction = False

        pipe.execute_command, pipe.watch, pipe.unwatch, pipe.multi = execute_command, watch, unwatch, multi
        pipe.reset = reset_all
        return pipe


def rq_cluster_connection(client, wake_channel: str | None = None):
    """RQ's connection for ``client``: the client itself on a standalone Redis."""
    return RQClusterConnection(client, wake_channel) if core_is_cluster(client) else client


class ClusterConnection:
    """Mixed into RQ worker classes: RQ raises the socket timeout of its connection's pool above
    its blocking dequeue; a RedisCluster has no one pool, and its dequeue blocks for short turns."""

    def _set_connection(self, connection):
        if is_cluster(connection):
            return connection
        return super()._set_connection(connection)  # type: ignore[misc]


class ListedWorker(ClusterConnection, Worker):
    """RQ's Worker as read from RQ's registry (``Worker.all``), on either kind of Redis."""


class ClusterJob(Job):
    """RQ's Job whose keys carry its queue's hash tag (ids of other forms keep RQ's keys)."""

    @classmethod
    def key_for(cls, job_id: str) -> str:
        tagged = rq_job_tagged(job_id)
        return cls.redis_job_namespace_prefix + (tagged or job_id)

    @classmethod
    def dependents_key_for(cls, job_id: str) -> str:
        return f"{cls.key_for(job_id)}:dependents"

    @property
    def dependencies_key(self) -> str:
        return f"{self.key}:dependencies"


class ClusterQueue(RidingQueue):
    """RidingQueue whose dequeue never sends one command over lists of different slots."""

    job_class = ClusterJob

    def move_dependents_to_ready(self, *args, **kwargs) -> dict:
        return {}  # ghostless jobs have no RQ dependents (and RQ's read of them needs a WATCH)

    @classmethod
    def lpop(cls, queue_keys: Sequence[str], timeout: int | None, connection=None):
        assert connection is not None
        one_slot = len({key_slot(key.encode()) for key in queue_keys}) == 1
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = cls._pop_first(connection, queue_keys)
            if found is not None:
                return found
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DequeueTimeout(timeout, queue_keys)
            if one_slot:
                result = connection.blpop(queue_keys, max(min(left, BLOCK_ONE), 0.01))
                if result is not None:
                    return result
            else:
                connection.wait_for_wake(min(left, WAKE_WAIT))

    @staticmethod
    def _pop_first(connection, queue_keys: Sequence[str]):
        """LPOP of the first non-empty list, in the worker's order; None when all are empty."""
        while True:
            pipe = connection.pipeline(transaction=False)
            for key in queue_keys:
                pipe.llen(key)
            lengths = pipe.execute()
            ready = [key for key, n in zip(queue_keys, lengths) if n]
            if not ready:
                return None
            for key in ready:  # another worker may empty a list between the look and the pop
                job_id = connection.lpop(key)
                if job_id is not None:
                    return key, job_id
