"""The gevent server's connections (web/geventworker.py): what they are given arrives whole and in
order, whether the kernel takes it in one send or the reader is slow."""

from __future__ import annotations

from contextlib import contextmanager

import gevent
import gevent.socket

from ghostless.web.geventworker import BatchAcceptServer, GeventSocket, QuickSendSocket


@contextmanager
def client_of(handle):
    """A client connection to a BatchAcceptServer serving ``handle``; all within 30 s."""
    server = BatchAcceptServer(("127.0.0.1", 0), handle=handle)
    server.start()
    try:
        with gevent.Timeout(30):
            yield gevent.socket.create_connection(("127.0.0.1", server.server_port))
    finally:
        server.stop()


def test_a_connection_sends_all_it_is_given_in_order_also_past_a_full_send_buffer(monkeypatch):
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB: more than any send buffer takes at once
    slow_path = []
    gevent_sendall = GeventSocket.sendall
    monkeypatch.setattr(
        GeventSocket, "sendall", lambda self, data, flags=0: (slow_path.append(len(data)), gevent_sendall(self, data))
    )
    kinds = []

    def handle(sock, address):
        kinds.append(type(sock))
        sock.sendall(b"retry: 2000\n\n")
        sock.sendall(bytearray(b"data: {}\n\n"))
        sock.sendall(memoryview(big))
        sock.close()

    with client_of(handle) as client:
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
            gevent.sleep(0)  # a reader slower than the writer: the send buffer fills
        client.close()
    assert kinds == [QuickSendSocket]
    assert b"".join(chunks) == b"retry: 2000\n\ndata: {}\n\n" + big
    # the small messages went in one send each; only the rest of the big one waited in gevent's sendall
    assert len(slow_path) == 1 and 0 < slow_path[0] < len(big)


def test_the_worker_tunes_the_collector_once_the_app_is_loaded(monkeypatch):
    """A thousand streams' objects in flight, collected every 700 new ones, paused the process for a
    full collection every few seconds (bench/sse.py): the worker collects the young generation
    more rarely and leaves the loaded app out of every collection."""
    import gc

    from gunicorn.workers import ggevent

    from ghostless.web.geventworker import GC_GEN0_THRESHOLD, BatchAcceptGeventWorker

    before = gc.get_threshold()
    seen = []
    monkeypatch.setattr(ggevent, "StreamServer", ggevent.StreamServer)  # run swaps it
    monkeypatch.setattr(
        ggevent.GeventWorker, "run", lambda self: seen.append((gc.get_threshold(), gc.get_freeze_count()))
    )
    try:
        BatchAcceptGeventWorker.run(object.__new__(BatchAcceptGeventWorker))
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    [(threshold, frozen)] = seen
    assert threshold == (GC_GEN0_THRESHOLD, *before[1:]) and before[0] < GC_GEN0_THRESHOLD
    assert frozen > 0  # the app loaded before run is out of every collection


def test_a_send_to_a_client_that_left_fails_as_gevent_s_own_does():
    """The quick send does not hide an error: a client that left makes sendall raise, so the
    server ends that response (gunicorn closes the connection) instead of writing into nothing."""
    import socket

    import gevent.event

    left, done = gevent.event.Event(), gevent.event.Event()
    raised = []

    def handle(sock, address):
        left.wait()  # the client has reset the connection
        try:
            for _ in range(100):  # the first sends may still go out before the reset is seen
                sock.sendall(b"data: {}\n\n" * 100)
                gevent.sleep(0.01)
        except OSError as e:
            raised.append(type(e))
        finally:
            sock.close()
            done.set()

    with client_of(handle) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        client.close()  # linger 0: a reset
        left.set()
        done.wait()
    assert raised and raised[0] in (BrokenPipeError, ConnectionResetError)
