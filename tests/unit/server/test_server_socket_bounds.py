"""server/net/socket_bounds.py on real loopback sockets: the small window set after accept (and not
for a long link), how it grows, the held window, and the handshake round trip they read."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from headrace.server.net.socket_bounds import (BULK_PUBLISH, FAST_LINK_RTT, GROW_AFTER, Window, bound_window,
                                              handshake_rtt, shrinker)


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
        assert bound_window(held, 8192, 0.002, handshake_rtt(held))  # loopback is no long link
        assert rcvbuf(server) == 2 * 8192 < before  # Linux doubles what it is given


async def test_a_long_link_keeps_its_autotuned_window() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        # every link is long next to a nanosecond: loopback's microseconds are above it
        assert not bound_window(held, 8192, 1e-9, handshake_rtt(held))
        assert rcvbuf(server) == before
        assert bound_window(held, 8192, 0, handshake_rtt(held))  # 0: no link is exempt
        assert rcvbuf(server) == 2 * 8192


async def test_no_window_is_set_without_the_setting() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        assert not bound_window(held, 0, 0, handshake_rtt(held))
        assert rcvbuf(server) == before


async def test_the_held_window_is_set_on_the_real_socket_and_only_when_configured() -> None:
    """app.py's ``on_first_hold``: ``HELD_RCVBUF`` becomes the socket's receive buffer; with
    it at 0 (as it is) the socket keeps its autotuned buffer."""
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        shrinker(held, 0)()
        assert rcvbuf(server) == before
        shrinker(held, 8192)()
        assert rcvbuf(server) == 2 * 8192 < before


async def test_the_window_doubles_after_each_mib_read_up_to_its_limit() -> None:
    with accepted() as (_, server, held):
        assert bound_window(held, 8192, 0, handshake_rtt(held))
        window = Window(held, 8192, 32768)
        assert window.growing
        assert window.read(GROW_AFTER - 1) and rcvbuf(server) == 2 * 8192  # one byte short
        assert window.read(1) and rcvbuf(server) == 2 * 16384 and window.size == 16384
        assert window.read(GROW_AFTER - 1) and rcvbuf(server) == 2 * 16384
        assert not window.read(1)  # at its limit: the reader stops asking
        assert rcvbuf(server) == 2 * 32768 and not window.growing


async def test_small_publishes_on_a_fast_link_keep_the_small_window() -> None:
    """A stretch that averaged under BULK_PUBLISH bytes a publish does not grow the window of a
    connection whose handshake was fast (loopback's, measured here); a bulk stretch later does, and
    so does a stretch with no publish in it (a consumer's acks)."""
    with accepted() as (_, server, held):
        assert bound_window(held, 8192, 0, handshake_rtt(held))
        window = Window(held, 8192, 1 << 20, handshake_rtt(held))
        small = GROW_AFTER // 200 + 1  # ~200 bytes a publish
        assert window.read(GROW_AFTER, small) and rcvbuf(server) == 2 * 8192
        assert window.read(GROW_AFTER, 2 * small) and rcvbuf(server) == 2 * 8192
        # the next stretch counts its own publishes, not the earlier ones': bulk, so it grows
        bulk = 2 * small + GROW_AFTER // (2 * BULK_PUBLISH)
        assert window.read(GROW_AFTER, bulk) and rcvbuf(server) == 2 * 16384
        assert window.read(GROW_AFTER, bulk) and rcvbuf(server) == 2 * 32768  # no publish: grows


async def test_small_publishes_on_a_slower_link_grow_the_window() -> None:
    """On a link whose handshake took FAST_LINK_RTT or more the small window would cap a
    small-message publisher below what the broker routes: it grows after GROW_AFTER bytes, as does
    a connection whose round trip the platform does not say."""
    for rtt in (FAST_LINK_RTT, None):
        with accepted() as (_, server, held):
            assert bound_window(held, 8192, 0, handshake_rtt(held))
            window = Window(held, 8192, 1 << 20, rtt)
            assert window.read(GROW_AFTER, GROW_AFTER // 200) and rcvbuf(server) == 2 * 16384


async def test_the_kernel_cap_ends_the_growth() -> None:
    """SO_RCVBUF is capped at net.core.rmem_max: the window stops where the kernel stopped it."""
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    with accepted() as (_, server, held):
        window = Window(held, rmem_max, 4 * rmem_max)
        assert window.growing
        assert not window.read(GROW_AFTER)
        assert rcvbuf(server) == 2 * rmem_max and window.size == window.limit == rmem_max


async def test_an_autotuned_or_fixed_window_never_grows() -> None:
    with accepted() as (_, server, held):
        before = rcvbuf(server)
        assert not Window(held, 0, 1 << 20).growing  # no small window was set (or a long link)
        assert not Window(held, 8192, 8192).growing  # a limit no larger (RCVBUF_MAX): fixed
        assert rcvbuf(server) == before
