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

from .records import HEADER, HEADER_SIZE
from .store_index import SegmentLive
from .store_ops import DELAY_HEAD, REC_DELAY, Delay, DelayRow, DelayTarget
from .store_segments import Segment

__all__ = ["BLOCK", "DelayedIndex", "LiveDelays", "live_delays"]

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
        """A Delay record of ``size`` bytes in segment ``seq`` (replacing an older one). ``_find``
        and ``_set`` inlined for a new id: the rebuild calls this once per Delay record."""
        block, byte, bit = mid >> _SHIFT, (mid & _MASK) >> 3, 1 << (mid & 7)
        segs = self._blocks.get(block)
        if segs is None:
            segs = self._blocks[block] = {}
        else:
            for old, held in segs.items():
                if held[byte] & bit:
                    self._clear(mid, old)
                    return self._set(mid, seq, size)
        bits = segs.get(seq)
        if bits is None:
            bits = segs[seq] = bytearray(_EMPTY)
        bits[byte] |= bit
        live = self._seg_live.get(seq)
        if live is None:
            live = self._seg_live[seq] = SegmentLive()
        live.count += 1
        live.bytes += size
        self._live_bytes += size
        self._count += 1
        return None

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


READ_BYTES = 1 << 20  # of a segment per read, and so about the most one batch holds


class LiveDelays:
    """The live Delay records, read again from the segments that hold any, in log order, a chunk
    of a segment at a time: recovery hands them on (into the schedule's bucket files) a batch at a
    time instead of holding them all. Valid until the store's next write (compaction may delete
    a segment after it)."""

    __slots__ = ("_delayed", "_segments")

    def __init__(self, delayed: DelayedIndex, segments: Sequence[Segment]) -> None:
        self._delayed, self._segments = delayed, list(segments)

    def __iter__(self) -> Iterator[Delay]:
        """One ``Delay`` each (a decoded copy: for tests and small stores; recovery takes ``batches``)."""
        for batch in self.batches():
            for (vhost, exchange, lex), rows in batch.items():
                for due, mid, lrk, lprops, tail in rows:
                    r_at, p_at = lex + lrk, lex + lrk + lprops
                    yield Delay(mid, vhost, exchange, tail[lex:r_at].decode(), tail[r_at:p_at],
                                tail[p_at:], due)

    def batches(self) -> Iterator[dict[DelayTarget, list[DelayRow]]]:
        """Per read of a segment, its live delayed messages grouped by (vhost, exchange), each
        group in log order. Each record is looked at once: its head unpacked, its vhost and
        exchange looked up by their bytes, its tail sliced; nothing else is made per message.
        CRCs are not checked again: the rebuild checked every record up to ``seg.size``."""
        delayed = self._delayed
        blocks = delayed._blocks  # noqa: SLF001 - this module's own index, read in the loop
        unpack_header, unpack_delay = HEADER.unpack_from, DELAY_HEAD.unpack_from
        head = DELAY_HEAD.size
        targets: dict[bytes, DelayTarget] = {}
        for seg in self._segments:
            if not delayed.live_in(seg.seq).count:
                continue
            seq = seg.seq
            with open(seg.path, "rb") as f:
                data, base = b"", 0  # data starts at file offset base
                while base < seg.size:
                    more = f.read(min(READ_BYTES, seg.size - base - len(data)))
                    if not more:
                        break  # the file is shorter than recovery found: nothing more is whole
                    data = data + more if data else more
                    batch: dict[DelayTarget, list[DelayRow]] = {}
                    pos, end = 0, len(data)
                    while pos + HEADER_SIZE <= end:
                        length, _, kind = unpack_header(data, pos)
                        start = pos + HEADER_SIZE
                        stop = start + length
                        if stop > end:
                            break
                        if kind == REC_DELAY:
                            mid, due, vlen, elen, rlen, plen = unpack_delay(data, start)
                            segs = blocks.get(mid >> _SHIFT)
                            bits = segs.get(seq) if segs else None
                            if bits is not None and bits[(mid & _MASK) >> 3] & (1 << (mid & 7)):
                                v_at = start + head
                                e_at = v_at + vlen
                                raw = data[v_at : e_at + elen]
                                target = targets.get(raw)
                                if target is None:
                                    target = targets[raw] = (raw[:vlen].decode(), raw[vlen:].decode(), elen)
                                rows = batch.get(target)
                                if rows is None:
                                    rows = batch[target] = []
                                rows.append((due, mid, rlen, plen, data[e_at:stop]))
                        pos = stop
                    base += pos
                    data = data[pos:]
                    if batch:
                        yield batch


def live_delays(delayed: DelayedIndex, segments: Sequence[Segment]) -> LiveDelays:
    """The live delayed messages of a rebuilt store, read lazily (``LiveDelays``)."""
    return LiveDelays(delayed, segments)
