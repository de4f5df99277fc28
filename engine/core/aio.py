"""The asyncio client: ``AsyncEngine``, the Engine's client calls awaited on redis.asyncio, for web
apps that are not Flask (FastAPI, Starlette, aiohttp).

It is made from the app's Engine and shares its task types (the allowlist ``submit`` checks, args
bound to each function's signature, internal types refused), config, namespace and dispatcher: an
app defines its tasks once, on the Engine its workers load. Each call is the Engine's own body
(engine/core/steps.py): the same arguments, answers and errors, the same scripts and keys, run on
the async client. What has no asyncio form runs in a worker thread on the Engine's redis-py client
(``asyncio.to_thread``): the RQ enqueue of a dispatch (RQ is sync redis-py; the dispatch script
runs with it), the resolution of children when a task they wait on ended, and a process's first
use of a queue. A submitted task is therefore QUEUED with its RQ job when ``submit`` returns, as
with the Engine.
"""

from __future__ import annotations

import asyncio

from ghostless.core import dependencies as deps

from . import listing, submit_call, task_calls, tracing, waiting
from .aio_watch import StreamWatch
from .cluster import is_cluster
from .connect import connect_async
from .engine import Engine
from .plans import Plan
from .scripts import AsyncScripts
from .steps import Blocking, Command, Commands, Events, ReadTasks, async_call


class AsyncEngine:
    """The Engine's client calls, awaited on a redis.asyncio client (or fakeredis.aioredis).

    Args:
        redis: a redis.asyncio client (``Redis``, ``cluster.RedisCluster``, a Sentinel's primary)
            of the same Redis as ``engine.redis``.
        engine: the app's Engine: its task types, config, namespace and dispatcher.

    ``AsyncEngine.from_url(url, engine=engine)`` makes the async client from a URL;
    ``AsyncEngine.from_url(url, namespace=..., config=...)`` makes both, and its ``task`` decorator
    registers on that Engine (``aengine.engine``, what workers load).
    Calls: ``submit``, ``get``, ``get_many``, ``history``, ``checkpoints``, ``list_tasks``,
    ``queues``, ``cancel``, ``edit``, ``retry``, ``wait``, ``result``, each as the Engine's.
    Close with ``await aengine.aclose()`` (or ``async with``), which closes the async client.
    """

    def __init__(self, redis, engine: Engine):
        if not isinstance(engine, Engine):
            raise TypeError(f"AsyncEngine(redis, engine) takes the app's Engine, got {type(engine).__name__}")
        if is_cluster(redis) != is_cluster(engine.redis):
            raise ValueError(
                "the async client and the engine's client must be of the same Redis (both a cluster, or not)"
            )
        self.redis = redis
        self.engine = engine
        self.scripts = AsyncScripts(redis, engine.config, on_resolve=self._resolve)
        self._watch = StreamWatch(redis)  # waiters share one stream reader per queue
        # redis.asyncio's RedisCluster learns the slot map at its first command, and concurrent
        # first commands (and scripts) break it (redis-py #3935): it is initialized once, first.
        self._ready = not is_cluster(redis)
        self._starting = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str | None = None, engine: Engine | None = None, **kwargs) -> AsyncEngine:
        """An AsyncEngine on the Redis at ``url`` (any form of engine/core/connect.py; default
        ``GHOSTLESS_REDIS_URL``, else the local default), sharing ``engine`` (the app's Engine);
        without one, an Engine made by ``Engine.from_url(url, **kwargs)`` (namespace, config,
        dispatcher, strict), which checks the server now. Raises BadRedisURL."""
        if engine is not None and kwargs:
            raise TypeError(f"from_url(engine=...) shares that Engine's settings; got {sorted(kwargs)} too")
        return cls(connect_async(url), engine if engine is not None else Engine.from_url(url, **kwargs))

    @property
    def keys(self):
        return self.engine.keys

    @property
    def config(self):
        return self.engine.config

    @property
    def registry(self):
        return self.engine.registry

    def task(self, *args, **kwargs):
        """``Engine.task``: register a task type on the Engine (workers run it from there)."""
        return self.engine.task(*args, **kwargs)

    # The Engine's calls, written once (engine/core/steps.py).
    submit = tracing.traced_submit(async_call(submit_call.submit))
    get = async_call(task_calls.get)
    get_many = async_call(task_calls.get_many)
    history = async_call(task_calls.history)
    cancel = async_call(task_calls.cancel)
    edit = async_call(task_calls.edit)
    retry = async_call(task_calls.retry)
    wait = async_call(waiting.wait)
    result = async_call(waiting.result)
    checkpoints = async_call(task_calls.checkpoints)
    list_tasks = async_call(listing.list_tasks)
    queues = async_call(listing.queues)

    async def _do(self, step):
        """One step of a call, done on the async client (a Blocking one in a worker thread)."""
        if not self._ready:
            await self._start()
        if isinstance(step, Plan):
            return await self.scripts.run(step)
        if isinstance(step, Command):
            return await getattr(self.redis, step.name)(*step.args, **step.kwargs)
        if isinstance(step, Commands):
            return await step.queued(self.redis.pipeline(transaction=False)).execute()
        if isinstance(step, ReadTasks):
            return await self.scripts.read(*step)
        if isinstance(step, Events):
            return await self._watch.next_events(step)
        if isinstance(step, Blocking):
            return await asyncio.to_thread(step.fn, *step.args)
        return self.redis  # CLIENT

    async def _start(self) -> None:
        async with self._starting:
            if not self._ready:
                await self.redis.initialize()
                self._ready = True

    async def _resolve(self, waiting_key: str) -> None:
        """A script ended a task others wait on: resolve them now, as the Engine does."""
        await asyncio.to_thread(deps.resolve_due, self.engine, waiting_key)

    async def aclose(self) -> None:
        """Stop the stream readers, close the async client (the Engine's client is the app's)."""
        await self._watch.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
