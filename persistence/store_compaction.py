"""Compaction of the message store: deletes dead head segments and rewrites mostly-dead ones forward.

Owner: ``MessageStore`` (``message_store.py``); the flusher calls ``maybe_compact`` between group
commits. Why this can never resurrect a message is in the ``message_store`` module docstring.
"""

from __future__ import annotations

import logging
import os

from .fsync import FsyncMode, fsync_dir
from .records import iter_file_records
from .store_index import REC_DELAY, REC_PUBLISH, SEG, SIZE, Segment, StoreIndex
from .store_ops import Kind, decode_publish, message_id_of, publish_parts

__all__ = ["LIVE_RATIO_LOW", "MAX_REWRITES_PER_CALL", "StoreCompaction"]

log = logging.getLogger("headrace.persistence.message_store")

# A head segment whose live bytes fall under this share of its size is rewritten forward; so is
# any head while the whole store's live share is under it (bounds the disk at ~2x the live bytes).
LIVE_RATIO_LOW = 0.5
# Rewrites per maybe_compact() call: each copies at most one segment, which keeps a call (and the
# confirms waiting behind it in the flusher) short. Deleting dead segments is not limited.
MAX_REWRITES_PER_CALL = 1


class StoreCompaction(StoreIndex):
    """``maybe_compact`` and its helpers."""


    def maybe_compact(self) -> int:
        """Delete dead head segments and rewrite a mostly-dead head forward; returns net bytes
        freed (deleted minus copied)."""
        freed = 0
        rewrites = 0
        while len(self._segments) > 1:
            head = next(iter(self._segments.values()))
            if head is self._current:
                break
            if head.live_count == 0:
                freed += self._delete(head)
                continue
            if rewrites >= MAX_REWRITES_PER_CALL or self.failing is not None \
                    or not self._worth_rewriting(head):
                break  # (no copies while writes fail: deleting dead heads only frees room)
            rewrites += 1
            freed -= self._rewrite_forward(head)
            if head.live_count:
                log.error("segment %d still holds %d live records after a rewrite; keeping it",
                          head.seq, head.live_count)
                break
        return freed

    def _worth_rewriting(self, head: Segment) -> bool:
        return (head.live_bytes < head.size * LIVE_RATIO_LOW
                or self._live_bytes < self._disk_bytes * LIVE_RATIO_LOW)

    def _rewrite_forward(self, head: Segment) -> int:
        """Copy the head's live records to the current segment and make the copies durable."""
        copied = 0
        keys = self._keys
        for rec in iter_file_records(head.path):
            if rec.kind == Kind.PUBLISH:
                mid = message_id_of(rec.payload)
                loc = self._find(mid)
                if loc is None:
                    continue
                c, i = loc
                if c.seg[i] != head.seq or c.off[i] != rec.offset:
                    continue  # an older copy
                pub = decode_publish(rec.payload)
                held = self._queues_of(mid, c, i)
                names = [keys[slot][1] for slot in held]  # type: ignore[index]
                seg, off, n = self._append(REC_PUBLISH, publish_parts(
                    pub.mid, pub.ts, pub.vhost, names, list(held.values()), pub.exchange,
                    pub.routing_key, pub.props, pub.body))
                self._uncount_live(head, c.size[i])
                c.seg[i], c.off[i], c.size[i] = seg.seq, off, n
            elif rec.kind == Kind.DELAY:
                entry = self._delayed.get(message_id_of(rec.payload))
                if entry is None or entry[SEG] != head.seq:
                    continue
                seg, _, n = self._append(REC_DELAY, (rec.payload,))
                self._uncount_live(head, entry[SIZE])
                entry[SEG], entry[SIZE] = seg.seq, n
            else:
                continue
            self._count_live(seg, n)
            copied += n
        self.sync()
        return copied

    def _delete(self, seg: Segment) -> int:
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
        if self._mode is not FsyncMode.OFF:
            fsync_dir(self._dir)  # deletions must land in order: head first
        del self._segments[seg.seq]
        self._disk_bytes -= seg.size
        return seg.size
