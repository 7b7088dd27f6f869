"""What an AMQP socket may hold in flight in front of a reader the broker paused: the segment bound
on the listeners, and the small receive windows of the latency profile and of held connections.

Owner: the shell (``App``) calls these on its listeners before ``listen`` and on each accepted
AMQP socket before its handler starts; nothing else sets socket buffers.

Why the small window is set on the accepted socket, not on the listener: a listener's receive
buffer also decides the window scale its SYN-ACK offers, and one of 8 KiB offers none, which caps
the connection's window at 64 KiB for its whole life however its buffer changes later. Set after
accept, the socket keeps the scale Linux negotiated, and a connection over a long link (a
handshake round trip of ``amqp_rcvbuf_long_link_rtt`` or more) is left with Linux's autotuned
window: a small window costs nothing at a LAN's round trip but caps a publisher at 16 KiB per round
trip, a few hundred KB/s over 50 ms. The window only shrinks for what comes after it is set, so the
segments must be small too (``amqp_mss``): a window under one segment stalls a sender that has
seen a larger one (the settings refuse it).
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable

import trio

__all__ = ["bound_listeners", "bound_window", "handshake_rtt", "shrinker"]

log = logging.getLogger("headrace")

# struct tcp_info (linux/tcp.h): eight one-byte fields, then 32-bit ones; tcpi_rtt, the smoothed
# round trip in microseconds, is the sixteenth of those
_TCPI_RTT = struct.Struct("=I")
_TCPI_RTT_OFFSET = 8 + 15 * 4
_TCP_INFO_BYTES = _TCPI_RTT_OFFSET + _TCPI_RTT.size


def bound_listeners(listeners: list[trio.SocketListener], mss: int) -> None:
    """Every accepted AMQP socket inherits the listener's segment bound, offered in the SYN-ACK:
    the client's send buffer, which Linux sizes from its congestion window times the segment size,
    stays under 1 MB instead of 4 MB (ARCHITECTURE.md, "Backpressure"). Off by default."""
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


def bound_window(sock: trio.socket.SocketType, rcvbuf: int, long_link_rtt: float) -> bool:
    """The latency profile's small window (``amqp_rcvbuf``; the kernel doubles it) for a freshly
    accepted socket, unless its round trip is ``long_link_rtt`` seconds or more (0: no exemption).
    Returns whether the window was set."""
    if not rcvbuf:
        return False
    if long_link_rtt:
        rtt = handshake_rtt(sock)
        if rtt is not None and rtt >= long_link_rtt:
            return False
    return _set_rcvbuf(sock, rcvbuf)


def shrinker(sock: trio.socket.SocketType, rcvbuf: int) -> Callable[[], None]:
    """What a connection does the first time a saturated queue holds it: its receive buffer
    drops to ``rcvbuf`` (the amqp_held_rcvbuf setting; nothing when 0). Not advised: the shrink
    drops what the peer had already sent into the window it was offered, and the client's kernel
    remembers the retransmissions as reordering for our address (ARCHITECTURE.md)."""
    def shrink() -> None:
        if rcvbuf:
            _set_rcvbuf(sock, rcvbuf)
    return shrink


def _set_rcvbuf(sock: trio.socket.SocketType, rcvbuf: int) -> bool:
    try:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, rcvbuf)
    except OSError as exc:  # the connection is already going: nothing to bound
        log.debug("cannot set a connection's receive buffer: %s", exc)
        return False
    return True
