"""Recovery of the message store: reads every segment once at open and rebuilds the live indexes.

Rule 1: ``rebuild`` owns nothing after it returns: it makes a ``StoreIndex`` and a ``DelayedIndex``,
fills them by replaying the log, and hands them over in a ``Rebuilt`` with the segments it found
(their sizes cut to the last good record) and what the broker needs from the log; the live
delayed messages are read again from the segments afterwards (``store_delayed.live_delays``), so
the replay holds none of them. ``MessageStore``
(``message_store.py``) calls it once, before any write. Rule 2: the replay does to the indexes what
each record's op did when it was written (``message_store``'s docstring), through the same index
methods, so the rebuilt indexes are the ones the writer had.

Why a function that returns what it rebuilt: the store opens with whatever it is given. The index
checkpoint (``store_checkpoint.py``) plugs in here: ``rebuild`` starts from the checkpoint's index
and replays only the records after its position, or replays everything when there is no
checkpoint that matches the segments.
"""

from __future__ import annotations

import gc
import logging
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE, Record
from .segments import list_segments, zero_tail
from .store_checkpoint import Checkpoint, load_checkpoint, missing_segments
from .store_delayed import DelayedIndex
from .store_index import StoreIndex
from .store_ops import (
    DECODE_ERRORS,
    DELAY_HEAD,
    PUB_HEAD,
    PUB_QUEUE,
    REC_ACK,
    REC_DELAY,
    REC_DELIVER,
    REC_DROP_QUEUE,
    REC_PUBLISH,
    REC_PURGE,
    REC_UNDELAY,
    QKey,
    decode_publish_head,
    decode_delay,
    decode_purge,
    decode_queue,
    decode_ref,
    message_id_of,
)
from .store_segments import Segment

_ID = struct.Struct(">Q")  # the id that starts a Delay payload

__all__ = ["Rebuilt", "rebuild"]

log = logging.getLogger("headrace.persistence.message_store")


@dataclass(slots=True)
class Rebuilt:
    """What a replay of the segments rebuilt, for ``MessageStore`` to open with."""

    index: StoreIndex
    delayed: DelayedIndex
    segments: list[Segment]  # log order; the last one's size is where writing continues
    next_message_id: int  # > every id seen in any record
    damaged: int  # bytes after the last good record of any segment (0 if clean)


def rebuild(directory: Path) -> Rebuilt:
    """Rebuild the indexes from the index checkpoint and the log after it, or, without a
    checkpoint that matches the segments (``store_checkpoint.py``), from every segment in order.

    A torn or corrupt tail of the last segment is cut off (its size ends at the last good record,
    where writing continues); in older segments the bytes after the bad record are ignored."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a bulk load of acyclic objects: collections would only rescan the heap
    try:
        ckpt = load_checkpoint(directory)
        if ckpt is not None:
            try:
                rebuilt = _from_checkpoint(directory, ckpt)
            except Exception:  # noqa: BLE001 - a shortcut only: whatever goes wrong, the whole log decides
                log.exception("%s: replaying the log after the index checkpoint failed; replaying "
                              "the whole log", directory)
                rebuilt = None
            if rebuilt is not None:
                return rebuilt
            del ckpt
        return _rebuild(directory, None)
    finally:
        if gc_was_enabled:
            gc.enable()


def _from_checkpoint(directory: Path, ckpt: Checkpoint) -> Rebuilt | None:
    """The checkpoint's index with the log after its position replayed on top, or None (logged)
    when it does not match the segments."""
    present = dict(list_segments(directory))
    missing = missing_segments(ckpt, present)
    if missing is not None:
        rebuilt = _rebuild(directory, ckpt)
        if not any(rebuilt.index.live_in(s).count for s in missing):
            for s in missing:
                rebuilt.index.forget_segment(s)
            log.info("message store: index checkpoint at segment %d offset %d, %d bytes of log "
                     "replayed after it", ckpt.seq, ckpt.offset,
                     sum(seg.size for seg in rebuilt.segments if seg.seq >= ckpt.seq) - ckpt.offset)
            return rebuilt
    log.warning("%s: the index checkpoint does not match the segments; replaying the whole log",
                directory)
    return None


def _rebuild(directory: Path, ckpt: Checkpoint | None) -> Rebuilt:
    """Replays the log in order (after the checkpoint's position, with one); holds no more than
    the indexes themselves, whatever the backlog."""
    index, delayed = (StoreIndex(), DelayedIndex()) if ckpt is None else (ckpt.index, DelayedIndex())
    segs = list_segments(directory)
    found: list[Segment] = []
    damaged = 0
    max_id = ckpt.top_id if ckpt is not None else 0
    sealed = dict((s, size) for s, size, _ in ckpt.covered) if ckpt is not None else {}
    for n, (seq, path) in enumerate(segs):
        if ckpt is not None and seq < ckpt.seq:
            found.append(Segment(seq, path, sealed[seq]))  # covered: its records are in the index
            continue
        data = path.read_bytes()
        seg = Segment(seq, path, len(data))
        found.append(seg)
        start = ckpt.offset if ckpt is not None and seq == ckpt.seq else 0
        end, top = _replay_segment(index, delayed, data, seq, start)
        max_id = max(max_id, top)
        is_last = n == len(segs) - 1
        if end < len(data) and zero_tail(data, end):
            seg.size = end  # the zeros a syncing writer keeps ahead (segments.py): not damage
        elif end < len(data):
            damaged += len(data) - end
            log.warning(
                "%s: %d bytes after offset %d are torn or corrupt; %s",
                path, len(data) - end, end, "truncating" if is_last else "ignoring them",
            )
            if is_last:
                seg.size = end
        del data
    return Rebuilt(index, delayed, found, max_id + 1, damaged)


def _replay_segment(index: StoreIndex, delayed: DelayedIndex, data: bytes, seq: int,
                    start: int = 0) -> tuple[int, int]:
    """Apply a segment's good records from ``start``; returns (end of the last good one, highest
    id seen).

    ``records.iter_records`` inlined, and a one-queue Publish (nearly every record of a
    backlog) indexed straight from the buffer, as is a Delay (only its id): no record object and
    no payload copy."""
    view = memoryview(data)
    end = len(data)
    unpack_header = HEADER.unpack_from
    unpack_head = PUB_HEAD.unpack_from
    unpack_queue = PUB_QUEUE.unpack_from
    crc32 = zlib.crc32
    kind_crc = [crc32(bytes((kind,))) for kind in range(8)]
    head_size, queue_size = PUB_HEAD.size, PUB_QUEUE.size
    names: dict[bytes, tuple[int, QKey]] = {}  # queue name + vhost bytes -> (name length, key)
    slot_of, put = index.slots.take, index.put
    delay, unpack_id, delay_head = delayed.delay, _ID.unpack_from, DELAY_HEAD.size
    pos, top = start, 0
    try:
        while pos + HEADER_SIZE <= end:
            length, crc, kind = unpack_header(data, pos)
            start = pos + HEADER_SIZE
            stop = start + length
            if length > MAX_RECORD_SIZE or stop > end:
                break
            if crc32(view[start:stop], kind_crc[kind] if kind < 8 else crc32(bytes((kind,)))) != crc:
                break
            if kind == REC_PUBLISH:
                mid, _, nq, vlen, _, _, _ = unpack_head(data, start)
            elif kind == REC_DELAY and length >= delay_head:  # only its id counts here (live_delay_batches)
                mid = unpack_id(data, start)[0]
                delay(mid, seq, HEADER_SIZE + length)
                if mid > top:
                    top = mid
                pos = stop
                continue
            if kind != REC_PUBLISH or nq != 1:
                mid = _replay(index, delayed, Record(pos, kind, data[start:stop]), seq)
            else:
                nlen, count = unpack_queue(data, start + head_size)
                at = start + head_size + queue_size
                if at + nlen + vlen > stop:
                    raise ValueError("field runs past the end of the record")
                raw = data[at : at + nlen + vlen]
                known = names.get(raw)
                if known is None or known[0] != nlen:
                    known = names[raw] = (nlen, (raw[nlen:].decode(), raw[:nlen].decode()))
                put(mid, seq, pos, HEADER_SIZE + length, slot_of(known[1]), count)
            if mid > top:
                top = mid
            pos = stop
    except DECODE_ERRORS as exc:
        log.warning("undecodable record in segment %d at offset %d: %s", seq, pos, exc)
    return pos, top


def _replay(index: StoreIndex, delayed: DelayedIndex, rec: Record, seq: int) -> int:
    """Apply one record to the indexes; returns the message id it names (0 if none)."""
    kind = rec.kind
    p = rec.payload
    if kind == REC_PUBLISH:
        mid, _, vhost, names, _ = decode_publish_head(p)
        if names:
            slots = index.slots
            held: dict[int, int] = {}
            for name, count in names:
                key = (vhost, name)
                slot = slots.ids.get(key)
                if slot is None or slot not in held:
                    slot = slots.take(key)
                held[slot] = count  # a queue named twice is kept once, as the index does
            index.put_held(mid, seq, rec.offset, HEADER_SIZE + len(p), held)
        return mid
    if kind == REC_ACK or kind == REC_DELIVER:
        mid, vhost, queue = decode_ref(p)
        if kind == REC_ACK:
            index.remove(mid, (vhost, queue))
        else:
            index.deliver(mid, (vhost, queue))
        return mid
    if kind == REC_DROP_QUEUE:
        index.kill_queue(decode_queue(p), frozenset())
    elif kind == REC_PURGE:
        index.kill_queue(*decode_purge(p))
    elif kind == REC_DELAY:
        mid = decode_delay(p).message_id  # read again after the replay (live_delays): not kept
        delayed.delay(mid, seq, HEADER_SIZE + len(p))
        return mid
    elif kind == REC_UNDELAY:
        mid = message_id_of(p)
        delayed.undelay(mid)
        return mid
    else:
        log.warning("skipping record of unknown kind %d in segment %d", kind, seq)
    return 0
