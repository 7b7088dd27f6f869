"""A connection's lifecycle, as the session and the network shell see it.

Rule 1: the ``Session`` is the only writer of its ``Lifecycle`` (``Session._enter``); the shell
only reads it to decide whether to keep reading and when the socket may go. The protocol core keeps
its own wire state (which method it expects next); this enum is what the rest of the server acts on.
Rule 2: leaving HANDSHAKE or OPEN is the one moment the connection's broker state is dropped
(channels closed, unacked messages returned, exclusive queues deleted), so it happens exactly once.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["LIVE", "Lifecycle"]


class Lifecycle(Enum):
    """In the order a connection goes through them; it never goes back."""

    HANDSHAKE = "handshake"  # protocol header to connection.open-ok
    OPEN = "open"  # connection.open-ok sent: channels may open
    CLOSING = "closing"  # connection.close sent or received: read only the close handshake
    CLOSED = "closed"  # nothing more to read; the socket goes once the writer has flushed


LIVE = frozenset({Lifecycle.HANDSHAKE, Lifecycle.OPEN})
