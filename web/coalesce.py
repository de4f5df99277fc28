"""The web's reads sent together: every request's credential and snapshot reads of the moment in one pipeline.

A reconnect storm opens thousands of streams at once, each with two reads (its credential, its
snapshot). Sent one by one, each read is one of redis-py's commands: a connection taken from the
pool (or a wait for one), a send, a timeout armed, a receive. The Coalescer's one sender thread
(a greenlet under gevent) sends every read queued while its previous pipeline was in flight in
the next one, at most ``limit`` a time, on one pooled connection, and hands each caller its
reply. A read with nothing else queued goes out at once, in a pipeline of one. Only reads go
through it: a pipeline is not a transaction, and nothing here retries a write.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections import deque

import redis

from ghostless.core.replies import parse
from ghostless.core.scripts import Scripts

IDLE = 5.0  # seconds without a read after which the sender ends


class _Call:
    __slots__ = ("abandoned", "command", "done", "outcome", "script")

    def __init__(self, command: tuple, script):
        self.command, self.script = command, script  # script: (LuaCall, keys, args) of a script's call
        self.done = threading.Event()
        self.outcome = None  # the reply, or the exception to raise
        self.abandoned = False  # its caller stopped waiting: not sent when still queued

    def settle(self, outcome) -> None:
        self.outcome = outcome
        self.done.set()


class Coalescer:
    """``execute(*command)``: the reply of one read command, sent in one pipeline with the others
    queued meanwhile; ``script(script, keys, args)``: a read-only script's (loaded when the
    server does not have it: engine/core/functions.py). A caller waits at most ``timeout`` seconds (then
    ``redis.TimeoutError``); an error of the pipeline (Redis unreachable, the pool busy) is raised
    to every caller in it, a command's own error to its caller."""

    def __init__(self, client, timeout: float, limit: int, idle: float = IDLE):
        self.client, self.timeout, self.limit, self.idle = client, timeout, max(1, int(limit)), idle
        self._queue: deque[_Call] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._sender: threading.Thread | None = None
        self._pid = os.getpid()
        self.pipelines = 0  # sent so far (tests, metrics)
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (c := ref()) is not None and c._forked())

    def _forked(self) -> None:
        """In a forked child: the parent's queue and lock (perhaps held by a parent's thread at the
        fork) are not the child's; its first read starts its own sender."""
        self._queue = deque()
        self._wake = threading.Condition(threading.Lock())
        self._sender = None

    def execute(self, *command):
        return self._call(_Call(command, None))

    def script(self, script, keys, args):
        keys, args = list(keys), list(args)
        return self._call(_Call(script.command(keys, args), (script, keys, args)))

    def _call(self, call: _Call):
        with self._wake:
            self._queue.append(call)
            # None yet, or not in this (forked) process, or it was stopped (a greenlet killed): a new one.
            if self._sender is None or self._pid != os.getpid() or not self._sender.is_alive():
                sender = threading.Thread(target=self._run, name="ghostless-coalesce", daemon=True)
                sender.start()
                self._sender, self._pid = sender, os.getpid()
            self._wake.notify()
        if not call.done.wait(self.timeout):
            call.abandoned = True
            raise redis.TimeoutError(f"Redis read not answered within {self.timeout:g}s")
        if isinstance(call.outcome, BaseException):
            raise call.outcome
        return call.outcome

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._queue and not self._wake.wait_for(lambda: self._queue, self.idle):
                    if self._sender is threading.current_thread():
                        self._sender = None  # idle: it ends (and lets an unused coalescer go); a read starts another
                    return
                batch = [self._queue.popleft() for _ in range(min(self.limit, len(self._queue)))]
                batch = [call for call in batch if not call.abandoned]  # after a stall: no stale load
            if not batch:
                continue
            try:
                self._send(batch)
            except Exception as e:  # noqa: BLE001 - the pipeline's error goes to every caller in it; the sender goes on
                for call in batch:
                    call.settle(copy.copy(e))  # each its own: one shared object would gather every caller's traceback
            except BaseException as e:  # stopped (a greenlet killed): answer its callers; the next call starts another
                for call in batch:
                    call.settle(redis.ConnectionError(f"the read's sender stopped: {e!r}"))
                raise

    def _send(self, batch: list[_Call]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for call in batch:
            pipe.execute_command(*call.command)
        replies = pipe.execute(raise_on_error=False)
        self.pipelines += 1
        for call, reply in zip(batch, replies):
            if call.script is not None:
                script, keys, args = call.script
                again = script if script.missing(reply) else script.fallback(reply)
                try:
                    reply = reply if again is None else again(keys=keys, args=args)  # loads it, then runs it
                except redis.RedisError as e:
                    reply = e
            call.settle(reply)


def read(engine, *command):
    """The reply of credential read ``command`` (a session's GET) on ``engine``: through its scripts'
    coalescer when it has them (the web's bounded engine), else sent alone."""
    if isinstance(engine.scripts, CoalescedScripts):
        return engine.scripts.credentials.execute(*command)
    return engine.redis.execute_command(*command)


class CoalescedScripts(Scripts):
    """The engine's scripts on ``client``, whose reads go through two coalescers (``timeout`` and
    ``limit`` as Coalescer's): a token's user (and a session's GET, ``read``) through
    ``credentials``, a task's snapshot through ``snapshots``, so that credential checks never wait
    behind large snapshots (a task's args and result, up to MiBs)."""

    def __init__(self, client, config, timeout: float, limit: int, on_resolve=None):
        super().__init__(client, config, on_resolve=on_resolve)
        self.credentials = Coalescer(client, timeout, limit)
        self.snapshots = Coalescer(client, timeout, limit)

    def _read(self, name, keys, args) -> list:
        coalescer = self.snapshots if name == "read" else self.credentials
        return parse(coalescer.script(self._scripts[name], keys, [*self._cfg, *args]))
