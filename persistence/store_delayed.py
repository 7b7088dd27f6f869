"""The message store's delayed messages (x-delay): which segment holds each one's latest Delay record.

Rule 1: ``DelayedIndex`` owns the delayed messages' live bits and their live figures per segment and
in all. ``MessageStore`` (``message_store.py``) holds the one instance and calls it from its Delay and
Undelay handlers; recovery (``store_recovery.py``) fills it by replaying the log and then reads the
live records back through it (``live_delays``); compaction (``store_compaction.py``) asks it what is
live in a segment and tells it where a copy went.
Rule 2: it always equals what a replay of the segments would rebuild.

Why bits and not an entry per message: millions of messages may be delayed at once, and their
records (the message itself) are on disk already, in the log and in the schedule's bucket files
(``server/broker/delayed.py``), which owns everything else about each one. The store only has to
know, for a message id, which segment holds its latest Delay record, so that an Undelay releases
that segment and compaction keeps only live copies: one bit per id in the segment's bitmap of the
id's block of ``BLOCK`` ids. Ids are handed out in publish order, so a backlog of delayed messages
fills its blocks densely: about a bit per message, where a dict entry each took some 200 bytes and
10 million of them 2 GB. A segment's live bytes are its records' sizes summed, and an Undelay takes
the segment's average off (the size of each record is not kept): compaction only compares them
with a threshold, and they are exact again when the segment's last one goes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .records import HEADER_SIZE, iter_file_records
from .store_index import SegmentLive
from .store_ops import REC_DELAY, Delay, decode_delay
from .store_segments import Segment

__all__ = ["BLOCK", "DelayedIndex", "live_delays"]

_SHIFT = 10
BLOCK = 1 << _SHIFT  # ids per bitmap
_MASK = BLOCK - 1
_EMPTY = bytes(BLOCK // 8)


class DelayedIndex:
    """Delayed message id -> the segment of its latest Delay record, as bits per block of ids."""

    __slots__ = ("_blocks", "_live_bytes", "_seg_live", "_count")

    def __init__(self) -> None:
        self._blocks: dict[int, dict[int, bytearray]] = {}  # id >> _SHIFT -> segment seq -> bits
        self._seg_live: dict[int, SegmentLive] = {}
        self._live_bytes = 0
        self._count = 0

    def _find(self, mid: int) -> int | None:
        """The segment whose bit for ``mid`` is set (one at most), or None."""
        segs = self._blocks.get(mid >> _SHIFT)
        if segs:
            byte, bit = (mid & _MASK) >> 3, 1 << (mid & 7)
            for seq, bits in segs.items():
                if bits[byte] & bit:
                    return seq
        return None

    def _set(self, mid: int, seq: int, size: int) -> None:
        segs = self._blocks.get(mid >> _SHIFT)
        if segs is None:
            segs = self._blocks[mid >> _SHIFT] = {}
        bits = segs.get(seq)
        if bits is None:
            bits = segs[seq] = bytearray(_EMPTY)
        bits[(mid & _MASK) >> 3] |= 1 << (mid & 7)
        live = self._seg_live.get(seq)
        if live is None:
            live = self._seg_live[seq] = SegmentLive()
        live.count += 1
        live.bytes += size
        self._live_bytes += size
        self._count += 1

    def _clear(self, mid: int, seq: int) -> None:
        block = mid >> _SHIFT
        segs = self._blocks[block]
        bits = segs[seq]
        bits[(mid & _MASK) >> 3] &= ~(1 << (mid & 7))
        if bits == _EMPTY:
            del segs[seq]
            if not segs:
                del self._blocks[block]
        live = self._seg_live[seq]
        size = live.bytes // live.count  # the segment's average (module docstring)
        live.count -= 1
        live.bytes -= size
        self._live_bytes -= size
        self._count -= 1

    def delay(self, mid: int, seq: int, size: int) -> None:
        """A Delay record of ``size`` bytes in segment ``seq`` (replacing an older one)."""
        old = self._find(mid)
        if old is not None:
            self._clear(mid, old)
        self._set(mid, seq, size)

    def undelay(self, mid: int) -> bool:
        """The delayed message is released; False if it was not delayed."""
        seq = self._find(mid)
        if seq is None:
            return False
        self._clear(mid, seq)
        return True

    # -- compaction -----------------------------------------------------------------------------

    def live_in(self, seq: int) -> SegmentLive:
        """The live Delay records of segment ``seq`` (a fresh zero when it has none; not kept)."""
        return self._seg_live.get(seq) or SegmentLive()

    def forget_segment(self, seq: int) -> None:
        """Segment ``seq`` is deleted (it had nothing live, so no bit of it is set)."""
        self._seg_live.pop(seq, None)

    def is_in(self, mid: int, seq: int) -> bool:
        """Whether delayed ``mid``'s latest record is in segment ``seq``."""
        segs = self._blocks.get(mid >> _SHIFT)
        bits = segs.get(seq) if segs else None
        return bits is not None and bool(bits[(mid & _MASK) >> 3] & (1 << (mid & 7)))

    def move(self, mid: int, seq: int, size: int) -> None:
        """Delayed ``mid``'s latest record is now the copy in ``seq`` of ``size`` bytes."""
        self.delay(mid, seq, size)

    # -- figures --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def live_bytes(self) -> int:
        return self._live_bytes


def live_delays(delayed: DelayedIndex, segments: Sequence[Segment]) -> Iterator[Delay]:
    """The live Delay records, read again from the segments that hold any, in log order: recovery
    hands them on one at a time (into the schedule's bucket files) instead of holding them all.
    Valid until the store's next write (compaction may delete a segment after it)."""
    for seg in segments:
        if not delayed.live_in(seg.seq).count:
            continue
        for rec in iter_file_records(seg.path):
            if rec.offset + HEADER_SIZE + len(rec.payload) > seg.size:
                break  # past the good end recovery found
            if rec.kind == REC_DELAY:
                delay = decode_delay(rec.payload)
                if delayed.is_in(delay.message_id, seg.seq):
                    yield delay
