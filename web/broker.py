"""SSE fan-out: one stream reader thread per web process, bounded buffers per client.

The reader holds one Redis connection of its own and runs ``XREAD BLOCK`` over every
queue's event stream. Subscribers are indexed by what they watch: one task, one owner's tasks,
or everything (admins), so an event costs O(subscribers who want it), not a filter call per
subscriber. A subscriber's buffer holds at most ``limit`` events: a client that stops reading is dropped
(its buffer never grows past the bound) and reconnects with ``Last-Event-ID``, replaying
what it missed from the stream itself. No browser holds a Redis connection.

On a Redis Cluster each queue's stream is in its queue's slot ({queue} hash tag), and a cluster
refuses one XREAD over keys of different slots (CROSSSLOT, even for two queues on one node). There
the reader *polls* (engine/core/streams.py ``follow_streams``): each round sends a non-blocking
XREAD of every queue's stream in one cluster pipeline (one round trip per node), and waits
``POLL_MS`` (50 ms) only after a round that found nothing. So an event reaches its subscribers
at most ~50 ms plus a round trip later than on one Redis, and an idle web process sends 20 rounds
a second (each one short command per queue). Chosen over one blocking reader per queue, which
would hold a connection and a thread per queue: its cost grows with the queues, the poll's with
the nodes. When every stream read is in one slot (one queue) the reader blocks as on one Redis.

Through a failover (a cluster's shard, or Sentinel's primary) a read fails with a connection
error; the reader waits (backing off) and reads again from the positions it had delivered, so
every event the promoted replica has after them is delivered (what the old primary had not yet
replicated is lost: docs/operations.md, "Failover: what can be lost").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import redis as redis_lib

from ghostless.core.clock import retry_delay, server_ms
from ghostless.core.streams import MAX_SEQ, follow_streams, parse_stream_id, stream_event

from .pool import own_client

log = logging.getLogger("ghostless.web.broker")


class Event(dict):
    """One stream event as every subscriber it goes to shares it: the dict, read-only (a change by
    one subscriber would be seen by all, and not in the cached text), and its SSE message but the
    id line (``message``: web/eventstream.py ``event_message``), made when a subscriber first
    sends it rather than for each subscriber (bench/sse.py: 1,000 subscribers of every event), and
    its stream id parsed (``parsed_id``)."""

    __slots__ = ("message", "parsed_id")

    def __init__(self, fields: dict):
        super().__init__(fields)
        self.message: str | None = None
        self.parsed_id = parse_stream_id(fields.get("stream_id"))  # parsed once, compared by every subscriber

    def _read_only(self, *args, **kwargs):
        raise TypeError("a broker Event is shared by its subscribers: copy it (dict(ev)) to change it")

    __setitem__ = __delitem__ = __ior__ = _read_only
    update = pop = popitem = setdefault = clear = _read_only


class Dropped(Exception):
    """The subscriber fell more than its buffer behind and was dropped."""


class Subscriber:
    """One client's bounded buffer; the broker thread offers, the client's thread takes.
    ``index`` is what it watches: ("task", id), ("owner", name) or ("all", "").

    Light, as a process holds thousands (bench/watchers.py): one lock, held while there is
    nothing to take and released as the wake-up signal (no Condition, whose every wait makes a
    lock of its own), and a deque (append and popleft are atomic)."""

    __slots__ = ("_events", "_wake", "dropped", "due", "ended", "index", "limit", "ticked")

    def __init__(self, limit: int, index: tuple[str, str] = ("all", ""), ticked: bool = False):
        self.index = index
        self.limit = limit
        self.dropped = False
        self.ended = False  # by web/guard.py: its client left or its credential is gone
        # ticked: its waits arm no timer; its broker's ticker wakes it once ``due`` (its wait's end) has passed
        self.ticked = ticked
        self.due = 0.0
        self._events: deque[dict] = deque()
        self._wake = threading.Lock()
        self._wake.acquire()  # held: no signal; released: something to look at

    def _signal(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:  # already signalled
            pass

    def offer(self, event: dict) -> bool:
        """Buffer an event; False (and dropped from then on) when the buffer is full."""
        if self.dropped:
            return False
        if len(self._events) >= self.limit:
            self.dropped = True
        else:
            self._events.append(event)
        self._signal()
        return not self.dropped

    def end(self) -> None:
        """End its stream now (its next ``next`` raises Dropped, buffered events left unsent)."""
        self.ended = True
        self._signal()

    def next(self, timeout: float) -> dict | None:
        """The next buffered event, or None after ``timeout`` seconds without one.

        Raises Dropped once the buffered events are used up after a drop, and at once after ``end``.
        """
        deadline = None
        while True:
            if self.ended:
                raise Dropped()
            if self._events:
                return self._events.popleft()
            if self.dropped:
                raise Dropped()
            if deadline is None:
                deadline = self.due = time.monotonic() + timeout
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # Woken by a signal (perhaps one left over from an event already taken), the ticker or
            # the timeout: look again.
            if self.ticked:
                self._wake.acquire()
            else:
                self._wake.acquire(timeout=left)

    def __len__(self) -> int:
        return len(self._events)


class Broker:
    """Reads every queue's event stream once and fans events out to subscribers.

    Args:
        engine: the app's engine (its queues, keys and client to copy).
        block_ms: how long one XREAD blocks; also how often new queues are noticed and how
            long ``close()`` may wait.
        limit: each subscriber's buffer bound (events).
    """

    def __init__(self, engine, block_ms: int = 5000, limit: int = 1000, batch: int = 500, tick: float | None = None):
        self.engine, self.block_ms, self.limit, self.batch = engine, int(block_ms), int(limit), batch
        self.tick = tick
        self._ticker: threading.Thread | None = None
        # kind ("task", "owner", "all") -> watched value -> its subscribers
        self._index: dict[str, dict[str, set[Subscriber]]] = {"task": {}, "owner": {}, "all": {}}
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = None
        self.positions: dict[str, str] = {}  # queue -> last stream id read
        self._start_id = ""
        self._refreshed = 0.0

    def subscribe(
        self,
        *,
        task_id: str | None = None,
        owner: str | None = None,
        everything: bool = False,
        limit: int | None = None,
        ticked: bool = False,
    ) -> Subscriber:
        """A new subscriber fed, from now on, every event of the task ``task_id``, or of ``owner``'s
        tasks, or (``everything=True``) every event; with a buffer of ``limit`` events (default:
        the broker's). Exactly one of the three. ``ticked`` (with a broker ``tick``): its waits
        arm no timer of their own, and end up to ``tick`` seconds late (an SSE stream's keep-alive)."""
        if sum((task_id is not None, owner is not None, bool(everything))) != 1:
            raise ValueError("subscribe to one of task_id=, owner= or everything=True")
        index = ("task", task_id) if task_id is not None else ("owner", owner) if owner is not None else ("all", "")
        sub = Subscriber(limit or self.limit, index, ticked=ticked and self.tick is not None)
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("broker is closed")
            if self._thread is None:
                self._start()  # may raise (Redis down): then nothing is subscribed
            self._index[index[0]].setdefault(index[1], set()).add(sub)
            self._count += 1
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        """Stop feeding ``sub`` (again: nothing)."""
        kind, value = sub.index
        with self._lock:
            subs = self._index[kind].get(value)
            if subs is None or sub not in subs:
                return
            subs.discard(sub)
            self._count -= 1
            if not subs:
                del self._index[kind][value]

    def subscribers(self) -> int:
        with self._lock:
            return self._count

    def wanting(self, event: dict) -> list[Subscriber]:
        """The subscribers ``event`` goes to: its task's, its owner's and everything's."""
        with self._lock:
            found = []
            for kind, value in (("task", event["task_id"]), ("owner", event["owner"]), ("all", "")):
                found.extend(self._index[kind].get(value, ()))
            return found

    def close(self, timeout: float | None = None) -> None:
        """Stop the reader thread (it ends after its current XREAD) and close its connection; ticked
        subscribers wait with timers of their own from now on."""
        self._stop.set()
        for sub in self._all():
            sub.ticked = False
            sub._signal()
        thread = self._thread
        if thread is not None:
            thread.join(timeout if timeout is not None else self.block_ms / 1000 + 5)
        if self._client is not None:
            self._client.close()

    # -- the reader thread ------------------------------------------------------------------------
    def _start(self) -> None:
        client = own_client(self.engine.redis, self.block_ms / 1000 + 10)
        try:
            # Every queue starts at the reader's start time; one seen later starts there too, so
            # no event of a new queue is missed between its creation and the next queue refresh.
            self._start_id = f"{server_ms(client) - 1}-{MAX_SEQ}"
        except Exception:
            client.close()
            raise
        self._client = client
        self._thread = threading.Thread(target=self._run, name="ghostless-sse-broker", daemon=True)
        self._thread.start()
        if self.tick is not None:
            self._ticker = threading.Thread(target=self._tick_on, name="ghostless-sse-ticker", daemon=True)
            self._ticker.start()

    def _all(self) -> list[Subscriber]:
        with self._lock:
            return [sub for by_value in self._index.values() for subs in by_value.values() for sub in subs]

    def _tick_on(self) -> None:
        """Every ``tick`` seconds, wake the ticked subscribers whose wait has ended: one loop for all
        of them instead of a timer armed and cancelled by every wait (bench/sse.py: ~10% of a
        broadcast's CPU)."""
        while not self._stop.wait(self.tick):
            try:
                now = time.monotonic()
                for sub in self._all():
                    if sub.ticked and sub.due <= now:
                        sub._signal()
            except Exception:  # the one ticker must outlive a bad round
                log.exception("SSE ticker error")

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._read_once()
                failures = 0
            except redis_lib.RedisError as e:
                failures += 1
                log.warning("event stream read failed (%s); retrying", e)
                self._stop.wait(retry_delay(failures, 5.0, doublings=6))
            except Exception:  # the one reader must outlive a bad event
                log.exception("event stream reader error")
                self._stop.wait(1.0)

    def _read_once(self) -> None:
        if time.monotonic() - self._refreshed >= self.block_ms / 1000:
            for queue in self.engine.queues():
                self.positions.setdefault(queue, self._start_id)
            self._refreshed = time.monotonic()
        if not self.positions:
            self._stop.wait(self.block_ms / 1000)
            return
        keys = {self.engine.keys.queue_key(q, "events"): q for q in self.positions}
        streams = {k: self.positions[q] for k, q in keys.items()}
        for key, rows in follow_streams(self._client, streams, self.batch, self.block_ms):
            queue = keys[key]
            for sid, fields in rows:
                event = Event(stream_event(queue, sid, fields))
                self.positions[queue] = event["stream_id"]
                self._fan_out(event)

    def _fan_out(self, event: dict) -> None:
        for sub in self.wanting(event):
            if not sub.offer(event):
                log.info("dropped a slow SSE client (%d events behind)", sub.limit)
                self.unsubscribe(sub)
