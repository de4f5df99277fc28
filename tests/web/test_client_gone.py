"""web/held.py client_gone: a held stream looks, without reading, whether its client has left.

A web process holding thousands of streams has socket numbers far past 1024, where select()
cannot look (FD_SETSIZE): measured in bench/watchers.py, every stream past about the 1,000th of a
process ended right after its snapshot, as if its client had gone.
"""

from __future__ import annotations

import os
import socket

import pytest

from ghostless.web.held import client_gone
from tests.support.wait import wait_until


@pytest.fixture
def high_numbered_pair():
    """A connected TCP pair whose server side has a descriptor number over 1024."""
    spare = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            spare.append(fd)
            if fd > 1100:
                break
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        listener.close()
        assert server.fileno() > 1024
        yield server, client
        server.close()
        client.close()
    finally:
        for fd in spare:
            os.close(fd)


def test_a_live_client_on_a_high_descriptor_is_not_gone_and_a_closed_one_is(high_numbered_pair):
    server, client = high_numbered_pair
    environ = {"werkzeug.socket": server}
    assert not client_gone(environ)
    client.sendall(b"GET /next HTTP/1.1\r\n")  # a pipelined request: still there, and left unread
    assert not client_gone(environ)
    assert server.recv(100).startswith(b"GET /next")
    client.close()
    wait_until(lambda: client_gone(environ), 5, what="the closed client to be seen as gone")


def test_no_socket_to_look_at_is_not_gone():
    assert not client_gone({})
