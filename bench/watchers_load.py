"""The load generator of bench/watchers.py: one process holding many task pages' SSE streams.

Run by bench/watchers.py as ``python bench/watchers_load.py`` with a JSON config on its first
stdin line: ``{"port", "targets": [[index, task_id, token], ...], "start_at" (time.time() at
which every connection starts, the same in each generator process), "open_timeout" (s),
"hard_stop" (time.time() by which it ends whatever happens), "last_event_id" (optional: every
page resumes from it, as a browser reconnects, and counts as open at its first event, the one it
missed, or a snapshot)}``.

At ``start_at`` it opens every target's ``GET /api/tasks/<id>/events`` at once (asyncio, raw
sockets, HTTP/1.0 so the body is the bare event stream) and records per connection the status,
an error by kind, and the time from ``start_at`` to its first event (the ``snapshot``). Then it
prints one JSON line ``{"phase": "opened", ...}``. From then on it records, for every
``progress`` event, its delivery latency: arrival minus the send time the sender wrote into the
message (``t=<time.time()>``). On a ``stop`` line on stdin (or its own deadline) it prints
``{"phase": "done", ...}`` and exits.

Error kinds: ``refused`` / ``reset`` (connecting or before the snapshot), ``closed`` (EOF before
a status line or a snapshot), ``http <code>``, ``busy`` (a 200 stream that ended with a
comment and no snapshot: the server's stream cap, web/sse.py ``_held_stream``), ``no snapshot`` (a 200 that ended
without one), ``timeout: no answer`` / ``timeout: no snapshot`` (nothing by ``open_timeout``),
``OSError <errno name>`` (e.g. EMFILE when this process runs out of file descriptors), ``ended
after its snapshot`` (before the delivery phase began). Each page counts once: opened (open when
the phase ends) plus errors is every page. A stream that ends later counts as ``dropped``.
"""

from __future__ import annotations

import asyncio
import errno
import json
import resource
import sys
import time

T_MARK = b"t="


def response_head(buf: bytes) -> tuple[int, bytes] | None:
    """(status code, the body's bytes so far) once ``buf`` holds a whole response head, else None.
    The code is 0 when the status line has none."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    parts = buf[: buf.find(b"\r\n")].split()
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), buf[end + 4 :]


class Watch(asyncio.Protocol):
    """One task page's stream."""

    def __init__(self, gen: Generator, index: int, request: bytes):
        self.gen, self.index, self.request = gen, index, request
        self.transport = None
        self.buf = b""
        self.status: int | None = None
        self.live = False  # the snapshot came
        self.busy = False  # a retry hint without a snapshot
        self.ended = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buf += data
        if self.status is None:
            head = response_head(self.buf)
            if head is None:
                return
            self.status, self.buf = head
            if self.status != 200:
                self.gen.error(self, f"http {self.status}")
                self.transport.close()
                return
        while (end := self.buf.find(b"\n\n")) >= 0:
            block, self.buf = self.buf[:end], self.buf[end + 2 :]
            if not self.live:
                if b"event: snapshot" in block or (self.gen.resuming and b"event: progress" in block):
                    self.live = True
                    self.gen.opened(self, now, snapshot=b"event: snapshot" in block)
                elif block.startswith(b":"):  # a comment before any snapshot: the cap's refusal
                    self.busy = True
            elif b"event: progress" in block:
                at = block.find(T_MARK)
                if at >= 0:
                    stop = at + 2
                    while stop < len(block) and block[stop] in b"0123456789.":
                        stop += 1
                    self.gen.latency.append((now - float(block[at + 2 : stop])) * 1000)

    def connection_lost(self, exc) -> None:
        self.ended = True
        if self.live and self.gen.delivering:
            self.gen.dropped += 1
        elif self.live:
            self.gen.error(self, "ended after its snapshot")
        elif self.status is None or self.status == 200:
            kind = (
                ("reset" if isinstance(exc, ConnectionResetError) else repr(exc)[:60])
                if exc
                else ("closed" if self.status is None else "busy" if self.busy else "no snapshot")
            )
            self.gen.error(self, kind)


class Generator:
    def __init__(self, config: dict):
        self.config = config
        self.watches: dict[int, Watch] = {}
        self.errors: dict[str, int] = {}
        self.failed: set[int] = set()
        self.settled: set[int] = set()  # got a snapshot or failed
        self.ttfe: list[float] = []  # ms from start_at to the snapshot
        self.delivering = False  # the opening phase is over
        self.latency: list[float] = []  # ms from the sender's time.time() to arrival
        self.dropped = 0
        self.all_settled = asyncio.Event()
        self.resuming = config.get("last_event_id") is not None  # each page has one event to replay
        self.snapshots = 0  # resuming pages answered by a snapshot instead

    @property
    def _resume_header(self) -> str:
        last = self.config.get("last_event_id")
        return f"Last-Event-ID: {last}\r\n" if last else ""

    def _settled(self) -> None:
        if len(self.settled) >= len(self.config["targets"]):
            self.all_settled.set()

    def opened(self, watch: Watch, now: float, snapshot: bool = True) -> None:
        self.ttfe.append((now - self.config["start_at"]) * 1000)
        self.snapshots += snapshot and self.resuming
        self.settled.add(watch.index)
        self._settled()

    def error(self, watch: Watch | None, kind: str, index: int | None = None) -> None:
        index = watch.index if watch is not None else index
        if index in self.failed:
            return
        self.failed.add(index)
        self.settled.add(index)
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self._settled()

    async def _connect(self, index: int, task_id: str, token: str) -> None:
        port = self.config["port"]
        request = (
            f"GET /api/tasks/{task_id}/events HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n"
            f"Accept: text/event-stream\r\nAuthorization: Bearer {token}\r\n{self._resume_header}\r\n"
        ).encode()
        loop = asyncio.get_running_loop()
        try:
            _, watch = await loop.create_connection(lambda: Watch(self, index, request), "127.0.0.1", port)
            self.watches[index] = watch
        except ConnectionRefusedError:
            self.error(None, "refused", index)
        except ConnectionResetError:
            self.error(None, "reset", index)
        except OSError as e:
            self.error(None, f"OSError {errno.errorcode.get(e.errno, e.errno)}", index)

    async def run(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, cfg["start_at"] - time.time()))
        cpu0, wall0 = _cpu(), time.time()
        connects = [asyncio.ensure_future(self._connect(*t)) for t in cfg["targets"]]
        try:
            await asyncio.wait_for(
                self.all_settled.wait(), max(0.1, cfg["start_at"] + cfg["open_timeout"] - time.time())
            )
        except asyncio.TimeoutError:
            pass
        for c in connects:
            c.cancel()
        for index, *_ in cfg["targets"]:
            watch = self.watches.get(index)
            if watch is None or (not watch.live and not watch.ended):
                self.error(
                    None,
                    "timeout: no answer" if watch is None or watch.status is None else "timeout: no snapshot",
                    index,
                )
                if watch is not None and watch.transport is not None:
                    watch.transport.close()
        live = sorted(i for i, w in self.watches.items() if w.live and not w.ended)
        _emit(
            {
                "phase": "opened",
                "live": live,
                "errors": self.errors,
                "ttfe": self.ttfe,
                "snapshots": self.snapshots,
                "cpu": _cpu() - cpu0,
                "wall": time.time() - wall0,
                "fd_limit": _fd_limit(),
            }
        )
        self.latency.clear()  # the delivery phase starts now
        self.delivering = True
        cpu1, wall1 = _cpu(), time.time()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), cfg["hard_stop"] - time.time())
        except asyncio.TimeoutError:
            pass
        live = sorted(i for i, w in self.watches.items() if w.live and not w.ended)
        _emit(
            {
                "phase": "done",
                "latency": self.latency,
                "dropped": self.dropped,
                "live": live,
                "cpu": _cpu() - cpu1,
                "wall": time.time() - wall1,
            }
        )
        for w in self.watches.values():
            if w.transport is not None:
                w.transport.abort()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    config = json.loads(sys.stdin.readline())
    asyncio.run(Generator(config).run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
