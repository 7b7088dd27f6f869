"""What an AMQP socket may hold in flight in front of a reader the broker paused: the segment bound
on the listeners, each connection's small receive window from accept and how it grows, and the
window of held connections.

Owner: the shell (``App``) calls these on its listeners before ``listen`` and on each accepted
AMQP socket before its handler starts; nothing else sets socket buffers.

Why the small window is set on the accepted socket, not on the listener: a listener's receive
buffer also decides the window scale its SYN-ACK offers, and one of 16 KiB offers none, which caps
the connection's window at 64 KiB for its whole life however its buffer changes later. Set after
accept, the socket keeps the scale Linux negotiated, and a connection over a long link (a
handshake round trip of ``amqp_rcvbuf_long_link_rtt`` or more) is left with Linux's autotuned
window: a small window caps a publisher at one window per round trip, a few hundred KB/s over
50 ms. The window only shrinks for what comes after it is set, so the
segments must be small too (``amqp_mss``): a window under one segment stalls a sender that has
seen a larger one (the settings refuse it).

Why the window grows (``Window``): a small window only matters in front of a reader a saturated
queue holds, and it caps a publisher at one window per round trip (~28 KiB: 56 MB/s at a LAN's
0.5 ms). A connection that has read ``GROW_AFTER`` bytes (512 KiB) without a saturated queue ever
holding it is a bulk publisher or a consumer, not the publisher of a saturated pubsub: its window
doubles, and again after each 512 KiB more, up to ``RCVBUF_MAX`` (and the kernel's
``net.core.rmem_max``). Growing drops nothing; shrinking a live window would (``shrinker``), so
a window never shrinks back, and a connection that grew and later feeds a saturated queue is held
with its larger window.

Why small publishes on a fast link do not grow it: a stretch of 512 KiB that averaged under
``BULK_PUBLISH`` bytes a publish, from a connection whose handshake took under ``FAST_LINK_RTT``,
leaves the window as it is. There the small window costs nothing (over 400k publishes/s of 200 B
at 0.25 ms), and it is what packs such a publisher's writes: a client whose window is closed
only copies each publish into its send buffer, and the segments go out full when the broker reads;
behind a window that is never closed each publish is a packet of its own, sent through loopback in
the client's own call (benchmarks/RESULTS.md, "Small publishes keep the small window").
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable

import trio

__all__ = ["GROW_AFTER", "HELD_RCVBUF", "RCVBUF_MAX", "Window", "bound_listeners", "bound_window", "handshake_rtt",
           "shrinker"]

log = logging.getLogger("headrace")

# struct tcp_info (linux/tcp.h): eight one-byte fields, then 32-bit ones; tcpi_rtt, the smoothed
# round trip in microseconds, is the sixteenth of those
_TCPI_RTT = struct.Struct("=I")
_TCPI_RTT_OFFSET = 8 + 15 * 4
_TCP_INFO_BYTES = _TCPI_RTT_OFFSET + _TCPI_RTT.size

# Bytes a connection reads, never held by a saturated queue, before each doubling of its window.
# A saturated pubsub publisher is held within its first ~100 KB (the gate's ready bound and the
# consumers' prefetch, at ~200 B a publish, shared by two publishers); a bulk publisher on a LAN
# (0.5 ms) reads the first 512 KiB in ~10 ms at ~28 KiB a round trip, each later one in half the
# time, and has a 1 MiB window after 3 MiB.
GROW_AFTER = 512 << 10

# A stretch of GROW_AFTER bytes that averaged under BULK_PUBLISH bytes a publish, on a connection
# whose handshake took under FAST_LINK_RTT, does not grow the window: ~28 KiB a round trip of
# 0.25 ms is 112 MB/s, over 400k publishes/s of 200 B, more than one core routes.
BULK_PUBLISH = 1024
FAST_LINK_RTT = 0.00025

# The largest window a connection grows to (the kernel also caps it at net.core.rmem_max). It was
# the amqp_rcvbuf_max setting; measured, a window that never grows (16 KiB) halved a 64 KiB
# publisher and did not lower the saturated p50, and the small-publish rule above gives the single
# small-message publisher what a fixed window did (benchmarks/RESULTS.md, "Settings in groups").
RCVBUF_MAX = 4 << 20

# The receive buffer a connection gets the first time a saturated queue holds it: 0, never
# changed. It was the amqp_held_rcvbuf setting, off by default; measured, the shrink drops what the
# client had in flight and its kernel then starts every later connection to us with a send buffer
# for 301 segments (benchmarks/RESULTS.md, "Saturated pubsub with clean TCP metrics").
HELD_RCVBUF = 0


def bound_listeners(listeners: list[trio.SocketListener], mss: int) -> None:
    """Every accepted AMQP socket inherits the listener's segment bound, offered in the SYN-ACK:
    the client's send buffer, which Linux sizes from its congestion window times the segment size,
    stays under 1 MB instead of 4 MB (ARCHITECTURE.md, "Backpressure"). 7300 by default; 0 leaves
    the route's."""
    if not mss:
        return
    for listener in listeners:
        try:
            listener.socket.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_MAXSEG, mss)
        except OSError as exc:  # a platform without TCP_MAXSEG on listeners: the route's segments
            log.warning("cannot bound the AMQP segment size (amqp_mss): %s", exc)


def handshake_rtt(sock: trio.socket.SocketType) -> float | None:
    """The connection's smoothed round trip in seconds (just after accept: its handshake's), or
    None where the platform does not say (no ``TCP_INFO``)."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_BYTES)
    except OSError:
        return None
    if len(info) < _TCP_INFO_BYTES:
        return None
    return float(_TCPI_RTT.unpack_from(info, _TCPI_RTT_OFFSET)[0]) / 1e6


def bound_window(sock: trio.socket.SocketType, rcvbuf: int, long_link_rtt: float, rtt: float | None) -> bool:
    """The small window every connection starts with (``amqp_rcvbuf``; the kernel doubles it) for
    a freshly accepted socket, unless its round trip (``rtt``, the handshake's from
    ``handshake_rtt``; None where unknown) is ``long_link_rtt`` seconds or more (0: no exemption).
    Returns whether the window was set."""
    if not rcvbuf:
        return False
    if long_link_rtt and rtt is not None and rtt >= long_link_rtt:
        return False
    return _set_rcvbuf(sock, rcvbuf)


class Window:
    """One accepted socket's receive window as the shell set it (``amqp_rcvbuf`` after accept) and
    its growth: doubled after each ``GROW_AFTER`` bytes read, unless they were small publishes on a
    fast link (``rtt``: the handshake's, None where unknown). The reader calls ``read`` after each
    read while it returns True, and never again once a saturated queue held the connection."""

    __slots__ = ("_sock", "size", "limit", "_until", "_published", "_fast")

    def __init__(self, sock: trio.socket.SocketType, size: int, limit: int, rtt: float | None = None) -> None:
        self._sock = sock
        self.size = size  # the SO_RCVBUF asked for last (the kernel doubles it); 0: autotuned
        self.limit = limit  # RCVBUF_MAX: no growth past it
        self._until = GROW_AFTER  # bytes to read before the next doubling
        self._published = 0  # the connection's publishes when the stretch began
        self._fast = rtt is not None and rtt < FAST_LINK_RTT

    @property
    def growing(self) -> bool:
        return 0 < self.size < self.limit

    def read(self, nbytes: int, published: int = 0) -> bool:
        """``nbytes`` read, ``published`` the connection's publishes so far; False once the window
        has stopped growing (at its limit, the kernel's cap, or a socket that refused)."""
        self._until -= nbytes
        if self._until > 0:
            return True
        publishes = published - self._published
        self._published = published
        if self._fast and publishes and GROW_AFTER - self._until < BULK_PUBLISH * publishes:
            self._until = GROW_AFTER
            return True
        want = min(self.size * 2, self.limit)
        if not _set_rcvbuf(self._sock, want):
            self.limit = self.size
            return False
        try:  # the kernel caps what it is asked for at net.core.rmem_max (and doubles it)
            got = self._sock.getsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF) // 2
        except OSError:
            got = want
        # Linux computed the window's clamp from the small buffer and recomputes it only when its
        # payload-to-buffer ratio changes: without a new clamp the window would stay where it was
        _set_window_clamp(self._sock, 2 * got)
        if got < want:
            self.size = self.limit = got
            return False
        self.size = want
        self._until = GROW_AFTER
        return self.growing


def shrinker(sock: trio.socket.SocketType, rcvbuf: int) -> Callable[[], None]:
    """What a connection does the first time a saturated queue holds it: its receive buffer
    drops to ``rcvbuf`` (``HELD_RCVBUF``; nothing when 0). Not advised: the shrink
    drops what the peer had already sent into the window it was offered, and the client's kernel
    remembers the retransmissions as reordering for our address (ARCHITECTURE.md)."""
    def shrink() -> None:
        if rcvbuf:
            _set_rcvbuf(sock, rcvbuf)
    return shrink


def _set_window_clamp(sock: trio.socket.SocketType, clamp: int) -> None:
    option = getattr(socket, "TCP_WINDOW_CLAMP", None)
    if option is None:  # not Linux: no clamp kept from the small buffer either
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, option, clamp)
    except OSError as exc:
        log.debug("cannot set a connection's window clamp: %s", exc)


def _set_rcvbuf(sock: trio.socket.SocketType, rcvbuf: int) -> bool:
    try:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, rcvbuf)
    except OSError as exc:  # the connection is already going: nothing to bound
        log.debug("cannot set a connection's receive buffer: %s", exc)
        return False
    return True
