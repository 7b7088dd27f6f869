"""Socket reads and writes for a plain TCP connection at one scheduler round per operation.

Owner: each ``SocketIO`` belongs to one connection handler; its reader task alone calls
``receive_some``, and its writer task calls ``send_all`` or, while that task is parked, the shared
sender calls ``send_now`` (trio's one-reader, one-sender rule: never both at once).

Why not trio's ``SocketStream``: every successful ``send``/``recv`` there ends in a scheduler round
of its own, and a read that had to wait pays a second one, behind five layers of wrappers. At a
few messages per wake-up (a publisher waiting on each confirm, a consumer with a small prefetch)
those rounds are a third of the broker's CPU per message. Here:

- a read checks for cancellation first (so a cancelled reader never drops bytes it has read),
  tries ``read`` at once when the last read filled its buffer, and otherwise (the socket was empty
  after the last read: a client waiting on a reply) parks on ``wait_readable`` first, which saves
  the failed ``read`` such a client cost per message; a read that found data at once still yields
  (cancel-shielded), so a busy publisher cannot starve the loop;
- a write tries ``send`` at once and parks on ``wait_writable`` only while the kernel's buffer is
  full; the writer yields right after in its own wait for more to send.

TLS connections keep trio's ``SSLStream``: ``stream_io`` returns the stream itself for them.
"""

from __future__ import annotations

import os
import socket

import trio

__all__ = ["SocketIO", "stream_io"]


class SocketIO:
    __slots__ = ("_sock", "_fd", "_drained")

    def __init__(self, stream: trio.SocketStream) -> None:
        self._sock = stream.socket
        # the descriptor itself, for plain non-blocking read(2)/write(2): nothing here owns it, so
        # nothing here can close it; the handler's tasks end before the stream closes it
        self._fd = stream.socket.fileno()
        # the last read took less than it asked for: the socket was empty then, so the next read
        # waits for readiness first instead of trying (and failing) at once
        self._drained = False

    def _read(self, max_bytes: int) -> bytes | None:
        """One non-blocking read: its bytes (b"" at end of stream), or None when the socket is empty."""
        try:
            return os.read(self._fd, max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def receive_some(self, max_bytes: int) -> bytes:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._drained:
            data = self._read(max_bytes)
            if data is not None:
                self._drained = len(data) < max_bytes
                await trio.lowlevel.cancel_shielded_checkpoint()
                return data
        data = None
        while data is None:  # None again after a wake-up: a spurious one
            await trio.lowlevel.wait_readable(self._sock)
            data = self._read(max_bytes)
        self._drained = len(data) < max_bytes
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        fd = self._fd
        with memoryview(data) as view:
            sent = 0
            total = len(view)
            while sent < total:
                try:
                    sent += os.write(fd, view[sent:])
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self._sock)
                except OSError as exc:
                    raise trio.BrokenResourceError(str(exc)) from exc

    def send_now(self, data: bytes) -> int:
        """One non-blocking write: how many bytes the kernel took (0 when the socket is full, or
        broken: the writer task's ``send_all`` then meets the error and ends the connection)."""
        try:
            return os.write(self._fd, data)
        except OSError:
            return 0


def stream_io(stream: trio.abc.Stream) -> SocketIO | None:
    """The fast path for a plain TCP stream; None for anything else (TLS, test streams)."""
    if isinstance(stream, trio.SocketStream) and stream.socket.family in (socket.AF_INET, socket.AF_INET6):
        return SocketIO(stream)
    return None
