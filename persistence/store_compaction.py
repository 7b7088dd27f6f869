"""Compaction of the message store: deletes dead head segments and rewrites mostly-dead ones forward.

Rule 1: ``maybe_compact`` owns nothing; it is given the store's indexes (``StoreIndex``,
``DelayedIndex``: what is live where) and its ``StoreSegments`` (the files), asks the first and
tells them where each copy went, and appends and deletes through the second. ``MessageStore``
(``message_store.py``) calls it for the flusher between group commits. Rule 2: a head is deleted only
when nothing in it is live, after its live records were copied forward and synced; why this can
never resurrect a message is in the ``message_store`` module docstring.
"""

from __future__ import annotations

import logging

from .records import iter_file_records
from .store_delayed import DelayedIndex
from .store_index import StoreIndex
from .store_pages import NOT_PINNED
from .store_ops import REC_DELAY, REC_PUBLISH, Kind, decode_publish, message_id_of, publish_parts
from .store_segments import Segment, StoreSegments

__all__ = ["LIVE_RATIO_LOW", "MAX_REWRITES_PER_CALL", "maybe_compact"]

log = logging.getLogger("headrace.persistence.message_store")

# A head segment whose live bytes fall under this share of its size is rewritten forward; so is
# any head while the whole store's live share is under it (bounds the disk at ~2x the live bytes).
LIVE_RATIO_LOW = 0.5
# Rewrites per maybe_compact() call: each copies at most one segment, which keeps a call (and the
# confirms waiting behind it in the flusher) short. Deleting dead segments is not limited.
MAX_REWRITES_PER_CALL = 1


def maybe_compact(index: StoreIndex, delayed: DelayedIndex, segments: StoreSegments,
                  pinned: int = NOT_PINNED) -> int:
    """Delete dead head segments and rewrite a mostly-dead head forward, unless the head is
    ``pinned`` or above (a recovered queue still pages its records in from there:
    ``store_pages.StoreTail``); returns net bytes freed (deleted minus copied)."""
    freed = 0
    rewrites = 0
    while (head := segments.head()) is not None:
        if _live_count(index, delayed, head) == 0:
            index.forget_segment(head.seq)
            delayed.forget_segment(head.seq)
            freed += segments.delete_head()
            continue
        if rewrites >= MAX_REWRITES_PER_CALL or segments.failing is not None or head.seq >= pinned \
                or not _worth_rewriting(index, delayed, segments, head):
            break  # (no copies while writes fail: deleting dead heads only frees room)
        rewrites += 1
        freed -= _rewrite_forward(index, delayed, segments, head)
        left = _live_count(index, delayed, head)
        if left:
            log.error("segment %d still holds %d live records after a rewrite; keeping it",
                      head.seq, left)
            break
    return freed


def _live_count(index: StoreIndex, delayed: DelayedIndex, seg: Segment) -> int:
    return index.live_in(seg.seq).count + delayed.live_in(seg.seq).count


def _worth_rewriting(index: StoreIndex, delayed: DelayedIndex, segments: StoreSegments,
                     head: Segment) -> bool:
    head_live = index.live_in(head.seq).bytes + delayed.live_in(head.seq).bytes
    return (head_live < head.size * LIVE_RATIO_LOW
            or index.live_bytes() + delayed.live_bytes() < segments.disk_bytes() * LIVE_RATIO_LOW)


def _rewrite_forward(index: StoreIndex, delayed: DelayedIndex, segments: StoreSegments,
                     head: Segment) -> int:
    """Copy the head's live records to the current segment and make the copies durable."""
    copied = 0
    name = index.slots.name
    for rec in iter_file_records(head.path):
        if rec.kind == Kind.PUBLISH:
            mid = message_id_of(rec.payload)
            held = index.queues_at(mid, head.seq, rec.offset)
            if held is None:
                continue  # dead, or an older copy
            pub = decode_publish(rec.payload)
            seq, off, n = segments.append(REC_PUBLISH, publish_parts(
                pub.mid, pub.ts, pub.vhost, [name(slot) for slot in held], list(held.values()),
                pub.exchange, pub.routing_key, pub.props, pub.body))
            index.move(mid, seq, off, n)
        elif rec.kind == Kind.DELAY:
            mid = message_id_of(rec.payload)
            if not delayed.is_in(mid, head.seq):
                continue
            seq, _, n = segments.append(REC_DELAY, (rec.payload,))
            delayed.move(mid, seq, n)
        else:
            continue
        copied += n
    segments.sync()
    return copied
