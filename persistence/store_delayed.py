"""The message store's delayed messages (x-delay): where each one's latest Delay record is.

Rule 1: ``DelayedIndex`` owns the delayed messages' entries and their live figures per segment and in
all. ``MessageStore`` (``message_store.py``) holds the one instance and calls it from its Delay and
Undelay handlers; recovery (``store_recovery.py``) fills it by replaying the log; compaction
(``store_compaction.py``) asks it what is live in a segment and tells it where a copy went.
Rule 2: it always equals what a replay of the segments would rebuild.

Why apart from ``StoreIndex``: delayed messages are few and short-lived, so a dict entry each is
fine, and they have no queue; what they share with the index is only that their records keep a
segment alive, which compaction reads from both (``live_in``).
"""

from __future__ import annotations

from .store_index import SegmentLive

__all__ = ["DelayedIndex"]

# A delayed message's entry: [segment seq, record bytes].
_SEG, _SIZE = 0, 1


class DelayedIndex:
    """Delayed message id -> its latest Delay record's segment and size."""

    __slots__ = ("_entries", "_live_bytes", "_seg_live")

    def __init__(self) -> None:
        self._entries: dict[int, list[int]] = {}  # id -> [segment seq, record bytes]
        self._seg_live: dict[int, SegmentLive] = {}
        self._live_bytes = 0

    def _count(self, seq: int, size: int) -> None:
        live = self._seg_live.get(seq)
        if live is None:
            live = self._seg_live[seq] = SegmentLive()
        live.count += 1
        live.bytes += size
        self._live_bytes += size

    def _uncount(self, seq: int, size: int) -> None:
        live = self._seg_live[seq]
        live.count -= 1
        live.bytes -= size
        self._live_bytes -= size

    def delay(self, mid: int, seq: int, size: int) -> None:
        """A Delay record of ``size`` bytes in segment ``seq`` (replacing an older one)."""
        old = self._entries.pop(mid, None)
        if old is not None:
            self._uncount(old[_SEG], old[_SIZE])
        self._entries[mid] = [seq, size]
        self._count(seq, size)

    def undelay(self, mid: int) -> bool:
        """The delayed message is released; False if it was not delayed."""
        old = self._entries.pop(mid, None)
        if old is None:
            return False
        self._uncount(old[_SEG], old[_SIZE])
        return True

    # -- compaction -----------------------------------------------------------------------------

    def live_in(self, seq: int) -> SegmentLive:
        """The live Delay records of segment ``seq`` (a fresh zero when it has none; not kept)."""
        return self._seg_live.get(seq) or SegmentLive()

    def forget_segment(self, seq: int) -> None:
        """Segment ``seq`` is deleted (it had nothing live)."""
        self._seg_live.pop(seq, None)

    def is_in(self, mid: int, seq: int) -> bool:
        """Whether delayed ``mid``'s latest record is in segment ``seq``."""
        entry = self._entries.get(mid)
        return entry is not None and entry[_SEG] == seq

    def move(self, mid: int, seq: int, size: int) -> None:
        """Delayed ``mid``'s latest record is now the copy in ``seq`` of ``size`` bytes."""
        entry = self._entries[mid]
        self._uncount(entry[_SEG], entry[_SIZE])
        entry[_SEG], entry[_SIZE] = seq, size
        self._count(seq, size)

    # -- figures --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def live_bytes(self) -> int:
        return self._live_bytes
