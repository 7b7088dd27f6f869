"""server/net/socket_bounds.py on real loopback sockets: the latency profile's window set after
accept (and not for a long link), the held window, and the handshake round trip they read."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from headrace.server.net.socket_bounds import bound_window, handshake_rtt, shrinker


@contextmanager
def accepted() -> Iterator[tuple[socket.socket, socket.socket, trio.socket.SocketType]]:
    """A loopback connection: the client, the accepted socket, and that socket as the shell holds it."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            held = trio.socket.from_stdlib_socket(server.dup())  # the same socket, another descriptor
            try:
                yield client, server, held
            finally:
                held.close()
    finally:
        listener.close()


def rcvbuf(sock: socket.socket) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


async def test_the_handshake_round_trip_is_read_from_the_kernel() -> None:
    with accepted() as (_, _, held):
        rtt = handshake_rtt(held)
        assert rtt is not None and 0 < rtt < 1.0  # loopback: microseconds, on any machine


async def test_the_latency_window_is_set_on_a_short_link() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        assert bound_window(held, 8192, 0.002)  # loopback is no long link
        assert rcvbuf(server) == 2 * 8192 < before  # Linux doubles what it is given


async def test_a_long_link_keeps_its_autotuned_window() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        # every link is long next to a nanosecond: loopback's microseconds are above it
        assert not bound_window(held, 8192, 1e-9)
        assert rcvbuf(server) == before
        assert bound_window(held, 8192, 0)  # 0: no link is exempt
        assert rcvbuf(server) == 2 * 8192


async def test_no_window_is_set_without_the_setting() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        assert not bound_window(held, 0, 0)
        assert rcvbuf(server) == before


async def test_the_held_window_is_set_on_the_real_socket_and_only_when_configured() -> None:
    """app.py's ``on_first_hold``: ``amqp_held_rcvbuf`` becomes the socket's receive buffer; with
    the setting at 0 the socket keeps its autotuned buffer."""
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        shrinker(held, 0)()
        assert rcvbuf(server) == before
        shrinker(held, 8192)()
        assert rcvbuf(server) == 2 * 8192 < before
