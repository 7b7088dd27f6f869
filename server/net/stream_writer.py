"""The stream queues' logs, written by the store flusher (one owner for every file it syncs).

Rule: only the flusher task calls ``write`` (in its worker thread) and ``recover``/``enforce_retention``;
the event loop then reports each stream's new committed end to the delivery owner, which lets the
stream's consumers read on. A publisher's confirm waits for the same group as its store ticket, so
a confirmed message is in the stream after any crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headrace.persistence.mirror_log import MirrorLog, MirrorRow, Retention, list_segments
from headrace.persistence.store_ops import DropQueue
from headrace.persistence.tier_manifest import MANIFEST, first_offset, tier_dir_uri
from headrace.persistence.stream_log import (
    StreamAppend,
    StreamTrack,
    read_offsets,
    remove_stream,
    stream_dir,
    stream_root,
    write_offsets,
)
import trio

from headrace.server.broker import Broker
from headrace.server.broker.policies import stream_arguments
from headrace.server.broker.queue_types import parse_interval_ms
from headrace.server.broker.stream_filtering import filter_value
from headrace.server.broker.stream_queue import StreamQueue

__all__ = ["STREAM_OPS", "StreamWriter", "Written"]

log = logging.getLogger("headrace.streams")
DEFAULT_SEGMENT_BYTES = 64 << 20


@dataclass(slots=True)
class Written:
    key: tuple[str, str]
    end: int
    last_ts: int | None
    first: int


Settings = tuple[Retention, int]
Drop = tuple[tuple[str, str], str | None]  # a deleted stream, and the tier folder its policy names


def _settings(broker: Broker, queue: StreamQueue) -> Settings:
    """The stream's retention and segment size: its arguments, under its policy (policy wins)."""
    definition = broker.policies.applied(queue.vhost, "queue", queue.name, "stream").definition
    args = stream_arguments(queue.arguments, definition) if definition else queue.arguments
    age = parse_interval_ms(args.get("x-max-age")) if "x-max-age" in args else None
    size = args.get("x-max-length-bytes")
    segment = args.get("x-stream-max-segment-size-bytes") or DEFAULT_SEGMENT_BYTES
    return Retention(max_age_ms=age, max_bytes=size if isinstance(size, int) else None), int(segment)


class StreamWriter:
    def __init__(self, data_dir: Path, fsync: bool) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self.logs: dict[tuple[str, str], MirrorLog] = {}
        # writes go in turn, in the order their groups took their ops (a later offsets snapshot must
        # land last); the flusher already runs one group at a time, this keeps the rule local
        self._lock = trio.Lock()
        self._tiered: dict[Path, tuple[int, int, int | None]] = {}  # tiered streams' oldest bases, by manifest

    def _log(self, key: tuple[str, str], settings: Settings | None) -> MirrorLog:
        """The stream's open log, with its current settings (a policy may have changed them)."""
        retention, segment = settings or (Retention(), DEFAULT_SEGMENT_BYTES)
        log_ = self.logs.get(key)
        if log_ is None:
            log_ = self.logs[key] = MirrorLog(stream_root(self.data_dir), key[0], key[1], retention=retention,
                                              segment_max_bytes=segment)
            log_.recover()
        elif settings is not None:
            log_.retention, log_.segment_max_bytes = retention, segment
        return log_

    @staticmethod
    def queue(broker: Broker, key: tuple[str, str]) -> StreamQueue | None:
        vhost = broker.vhosts.get(key[0])
        queue = vhost.queues.get(key[1]) if vhost is not None else None
        return queue if isinstance(queue, StreamQueue) else None

    def recover(self, broker: Broker) -> None:
        """Open every stream's log (a torn tail is cut there) and give each queue its end, its
        first offset and its consumers' tracked offsets."""
        for vname, vhost in broker.vhosts.items():
            for qname, queue in vhost.queues.items():
                if isinstance(queue, StreamQueue):
                    log_ = self._log((vname, qname), _settings(broker, queue))
                    segs = list_segments(log_.root, vname, qname)
                    queue.restore(log_.next_offset, first_offset(log_.root, vname, qname, segs, 0, self._tiered),
                                  read_offsets(stream_dir(self.data_dir, vname, qname)), log_._stamp or None)

    def plan(self, broker: Broker, ops: Sequence[object]) -> tuple[dict[tuple[str, str], list[MirrorRow]],
                                                                 dict[tuple[str, str], dict[str, int]],
                                                                 list[Drop]]:
        """On the event loop: what the worker thread will write (records, offset snapshots, and
        the logs of deleted streams to remove, with the tier folder their policy names)."""
        appends: dict[tuple[str, str], list[MirrorRow]] = {}
        tracks: dict[tuple[str, str], dict[str, int]] = {}
        drops: list[Drop] = []
        for op in ops:
            kind = type(op)
            if kind is StreamAppend:
                appends.setdefault((op.vhost, op.queue), []).append(op.record)  # type: ignore[attr-defined]
            elif kind is StreamTrack:
                key = (op.vhost, op.queue)  # type: ignore[attr-defined]
                queue = self.queue(broker, key)
                if queue is not None:
                    tracks[key] = dict(queue.tracked)
            elif kind is DropQueue:
                key = (op.vhost, op.queue)  # type: ignore[attr-defined]
                if self.queue(broker, key) is None and (key in self.logs or stream_dir(self.data_dir, *key).exists()):
                    tier = broker.policies.applied(key[0], "queue", key[1], "stream").definition.get("tier-uri")
                    drops.append((key, tier_dir_uri(tier, "stream", *key) if isinstance(tier, str) else None))
        for key, _ in drops:
            appends.pop(key, None)
            tracks.pop(key, None)
        return appends, tracks, drops

    def write(self, settings: dict[tuple[str, str], Settings | None],
              appends: dict[tuple[str, str], list[MirrorRow]], tracks: dict[tuple[str, str], dict[str, int]],
              drops: list[Drop]) -> list[Written]:
        """In the flusher's worker thread: append, sync, retention of the logs written, offsets."""
        written: list[Written] = []
        for key, records in appends.items():
            log_ = self._log(key, settings.get(key))
            log_.append_rows(records, [filter_value(row[2]) for row in records])
            log_.flush(fsync=self.fsync)
            log_.enforce_retention(log_.stamp_ms)
            segs = list_segments(log_.root, *key)
            written.append(Written(key, log_.next_offset, log_.stamp_ms,
                                   first_offset(log_.root, *key, segs, log_.next_offset, self._tiered)))
        for key, offsets in tracks.items():
            write_offsets(stream_dir(self.data_dir, *key), offsets)
        for key, tier_dir in drops:
            dropped = self.logs.pop(key, None)
            if dropped is not None:
                dropped.close()
            remove_stream(self.data_dir, *key, tier_dir)
            self._tiered.pop(stream_dir(self.data_dir, *key) / MANIFEST, None)
        return written

    def retention_targets(self, broker: Broker) -> list[tuple[tuple[str, str], Settings]]:
        """On the event loop: the streams with a retention bound (their own, or their policy's)."""
        out = []
        for vname, vhost in broker.vhosts.items():
            for qname, queue in vhost.queues.items():
                if isinstance(queue, StreamQueue):
                    settings = _settings(broker, queue)
                    if settings[0] != Retention():
                        out.append(((vname, qname), settings))
        return out

    def enforce_retention(self, targets: list[tuple[tuple[str, str], Settings]], now_ms: int) -> list[Written]:
        """In a worker thread: idle streams age too; report the new first offsets."""
        out: list[Written] = []
        for key, settings in targets:
            log_ = self._log(key, settings)
            if log_.enforce_retention(now_ms):
                log.info("stream %s/%s: retention dropped old segments", *key)
                segs = list_segments(log_.root, *key)
                out.append(Written(key, log_.next_offset, None, first_offset(log_.root, *key, segs, log_.next_offset, self._tiered)))
        return out

    async def write_group(self, broker: Broker, ops: Sequence[object]) -> None:
        """The stream ops of one flusher group, written (and synced) before the group's confirms
        go out; then the streams' consumers are told of the new ends."""
        appends, tracks, drops = self.plan(broker, ops)
        if not (appends or tracks or drops):
            return
        queues = {key: _settings(broker, q) if (q := self.queue(broker, key)) is not None else None
                  for key in appends}
        try:
            async with self._lock:
                with trio.CancelScope(shield=True):  # ops taken are written, even at shutdown
                    written = await trio.to_thread.run_sync(self.write, queues, appends, tracks, drops)
        except OSError:
            for key in appends:  # reopened (torn tail cut) on the next write
                log_ = self.logs.pop(key, None)
                if log_ is not None:
                    try:
                        log_.close()
                    except OSError:
                        pass  # its unwritten bytes are what the reopen cuts off
            raise
        self.report(broker, written)

    async def retention(self, broker: Broker) -> None:
        targets = self.retention_targets(broker)
        if targets:
            try:
                async with self._lock:
                    written = await trio.to_thread.run_sync(self.enforce_retention, targets,
                                                            int(time.time() * 1000))
            except OSError as exc:
                log.warning("stream retention stopped: %s", exc)
                return
            self.report(broker, written)

    def report(self, broker: Broker, written: list[Written]) -> None:
        now = time.time()
        for item in written:
            queue = self.queue(broker, item.key)
            if queue is not None:
                broker.delivery.stream_appended(broker.vhosts[item.key[0]], queue, item.end, item.last_ts,
                                                item.first, now)

    def close(self) -> None:
        for log_ in self.logs.values():
            log_.close()
        self.logs.clear()


STREAM_OPS = frozenset({StreamAppend, StreamTrack})
