"""The AsyncEngine's waiters share one reader per queue stream (``AsyncEngine.wait``).

The Engine's waiter sends its own blocking XREAD, holding a pooled connection while it blocks; on
asyncio that would make every waiting request (a long-poll of a result, say) hold one of
redis.asyncio's connections (100 by default, ``MaxConnectionsError`` past them) and starve the
other calls. Here an ``Events`` step (engine/core/steps.py) registers the waiter's task id with the
stream's reader, one task per stream that blocks in XREAD while any waiter is registered and
hands each terminal transition to the waiters of its task: a thousand waiters on a queue cost one
connection. A waiter whose position is behind the reader's (it noted the stream before the
reader read on) first looks at the events in between with one XRANGE, so no end is missed. A
reader's error is raised in the waiters it was reading for; the next wait starts a new reader.
"""

from __future__ import annotations

import asyncio
import contextlib

from . import waiting
from .steps import Events
from .streams import MAX_SEQ, is_terminal, parse_stream_id, stream_event
from .text import text


class _Reader:
    """The reader of one stream and the waiters registered with it (task id -> their futures)."""

    def __init__(self, redis, key: str, queue: str, position: str):
        self.redis, self.key, self.queue, self.position = redis, key, queue, position
        self.waiters: dict[str, set[asyncio.Future]] = {}
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        # blocks as the Engine's waiter does: at most MAX_BLOCK, and half the client's read timeout
        block = max(1, int(min(waiting.MAX_BLOCK, waiting._socket_timeout(self.redis) / 2) * 1000))
        try:
            while self.waiters:
                reply = await self.redis.xread({self.key: self.position}, count=waiting.BATCH, block=block)
                for _key, rows in reply or []:
                    for sid, fields in rows:
                        self.position = text(sid)
                        event = stream_event(self.queue, sid, fields)
                        if is_terminal(event):
                            for future in self.waiters.get(event["task_id"], ()):
                                if not future.done():
                                    future.set_result(True)
        except Exception as e:  # noqa: BLE001 - raised in every waiter it read for
            for futures in self.waiters.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(e)


class StreamWatch:
    """``Events`` steps of one AsyncEngine's calls, answered by one reader per stream."""

    def __init__(self, redis):
        self.redis = redis
        self._readers: dict[str, _Reader] = {}

    async def next_events(self, step: Events) -> tuple[str, bool]:
        """(a position to go on from, whether the task ended) within ``step.block_ms``."""
        reader = self._readers.get(step.key)
        if reader is None or reader.task.done():
            reader = self._readers[step.key] = _Reader(self.redis, step.key, step.queue, step.position)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        reader.waiters.setdefault(step.task_id, set()).add(future)
        seen = reader.position  # the reader has handed out what came up to here: looked at below
        try:
            start = _after(step.position)
            if start is not None and _before(step.position, seen):
                rows = await self.redis.xrange(step.key, start, seen, count=waiting.BATCH)
                if waiting.scan([(step.key, rows)], step.queue, step.task_id, step.position)[1]:
                    return reader.position, True
            with contextlib.suppress(asyncio.TimeoutError):
                return reader.position, await asyncio.wait_for(asyncio.shield(future), step.block_ms / 1000)
            return reader.position, False  # since registering, the reader handed out what came
        finally:
            futures = reader.waiters.get(step.task_id, set())
            futures.discard(future)
            if not futures:
                reader.waiters.pop(step.task_id, None)

    async def aclose(self) -> None:
        """Stop the readers (their waiters' calls end with CancelledError). A cancelled XREAD on
        redis.asyncio's cluster client can take its whole block to end: waited for 1 s at most."""
        tasks = [reader.task for reader in self._readers.values() if not reader.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        self._readers.clear()


def _before(position: str, seen: str) -> bool:
    mine, theirs = parse_stream_id(position), parse_stream_id(seen)
    return mine is not None and theirs is not None and mine < theirs


def _after(position: str) -> str | None:
    """The first stream id after ``position`` (an inclusive XRANGE start on any Redis)."""
    parsed = parse_stream_id(position)
    if parsed is None:
        return None
    ms, seq = parsed
    return f"{ms}-{seq + 1}" if seq < MAX_SEQ else (f"{ms + 1}-0" if ms < MAX_SEQ else None)
