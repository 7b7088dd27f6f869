"""Reads of a tiered segment's copy, made off the event loop.

Owner: a stream cursor (``stream_log.StreamCursor``) owns the ``TierWindow`` of the segment it has
open when only the tier holds it: the bytes last read from there and the one ``TierRead`` it waits
for. The read itself runs in a worker thread of the shell (``server/net/stream_pump.py``) and
touches nothing but its own ``TierRead``: a remote store (``s3://``) answers in tens of
milliseconds, or not at all when it is out of reach, and no consumer's catch-up may hold the event
loop that long. The cursor asks, is told ``TierPending``, and its queue is dispatched again once
the read is done; until then it reads nothing and holds up no other consumer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tier_manifest import read_uri

__all__ = ["TIER_READ", "TierFailed", "TierPending", "TierRead", "TierWindow"]

TIER_READ = 1 << 20  # bytes fetched per read of a tier: an object store's round trip spread over many deliveries


class TierPending(Exception):
    """The bytes asked for are being read off the event loop (``TierWindow.take`` hands the read
    out once): ask again after it is done."""


class TierFailed(OSError):
    """The read of the tier failed: the cursor opens the segment again, which makes a new read
    (the shell makes it after a pause: a store out of reach is asked again, not in a loop)."""


@dataclass(slots=True, eq=False)
class TierRead:
    """``size`` bytes at ``position`` of the object at ``uri``; ``run`` (in a worker thread) sets
    ``data`` (shorter at the object's end) or ``failed``, then ``done``."""

    uri: str
    position: int
    size: int
    data: bytes = b""
    failed: bool = False
    done: bool = False

    def run(self) -> None:
        try:
            self.data = read_uri(self.uri, self.position, self.position + self.size)
        except (OSError, ValueError):  # unreachable, no credentials, gone; ValueError: pyarrow's ArrowInvalid
            self.failed = True
        self.done = True  # last: the event loop reads the result only once this is set


class TierWindow:
    """The bytes of one tiered segment that a cursor read last, and the read it waits for."""

    __slots__ = ("uri", "_data", "_at", "_eof", "_pending", "_fresh")

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._data = b""
        self._at = -1  # segment position of ``_data[0]`` (-1: nothing read yet)
        self._eof = False  # ``_data`` reaches the object's end
        self._pending: TierRead | None = None
        self._fresh: TierRead | None = None  # made, not yet handed to the shell

    def pread(self, n: int, position: int) -> bytes:
        """Up to ``n`` bytes at ``position``, from the window; ``TierPending`` when they are to be
        read first, ``TierFailed`` when the last read failed."""
        pending = self._pending
        if pending is not None:
            if not pending.done:
                raise TierPending
            self._pending = None
            if pending.failed:
                raise TierFailed(f"tier copy {self.uri} could not be read")
            self._data, self._at, self._eof = pending.data, pending.position, len(pending.data) < pending.size
        off = position - self._at
        if self._at >= 0 and off >= 0 and (off + n <= len(self._data) or self._eof):
            return self._data[off:off + n]
        self._pending = self._fresh = TierRead(self.uri, position, max(n, TIER_READ))
        raise TierPending

    def take(self) -> TierRead | None:
        """The read just made, once: the queue hands it to the shell."""
        fresh, self._fresh = self._fresh, None
        return fresh
