"""What the ``headrace`` source reads and where from: its options, the logs they name, their ranges.

A read names one log (``exchange``: a mirrored exchange; ``stream``: a stream queue) or the
partition streams of a super stream (``superStream``), and takes them from the broker's data
directory (``path``, on the broker's machine) or over the broker's HTTP API (``url``, ``user``,
``password``; ``remote.py``). Segments in a log's tier are read from the tier (any ``pyarrow.fs``
URI) either way; over ``url``, through the broker when this machine cannot reach the tier, or
always with ``tierRead=broker``. Either way a Spark partition is a run of consecutive ranges of one
log, never of two, so a super stream's Spark partitions follow its stream partitions; the rows of
a super stream carry their partition stream's name in the ``exchange`` column, and ``offset`` is
the offset within that stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import InputPartition

from headrace.persistence.mirror_log import list_mirrors, next_offset, read_ranges
from headrace.persistence.tier_manifest import all_segments

from .arrow_read import Bounds, buffer_batches, range_batches
from .remote import RemoteLog, RemoteRange

__all__ = ["DEFAULT_PARTITION_BYTES", "MIN_PARTITION_BYTES", "STREAMS_DIR", "LogPartition", "Source", "local_partitions"]

# Range size when the caller gives none (``read_log`` derives one from the session as Spark's file
# sources do: maxPartitionBytes, or less so that every core gets a share).
DEFAULT_PARTITION_BYTES = 32 << 20
# Smallest range worth a task of its own (Spark's spark.sql.files.openCostInBytes).
MIN_PARTITION_BYTES = 4 << 20
STREAMS_DIR = "streams"  # persistence.stream_log.stream_root: stream queues' logs
NAMES = ("exchange", "stream", "superStream")


def _time_ms(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    stamp = datetime.fromisoformat(value)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


class LogPartition(InputPartition):
    """Consecutive ranges of one log read by one task: one range of a big segment, or several small
    segments packed together (as Spark packs small files), so a log of many small segments is not a
    task each. ``remote`` None: ``ranges`` are ``ReadRange``s of local files."""

    def __init__(self, ranges: list[Any], vhost: str, name: str, kind: str, bounds: Bounds,
                 remote: RemoteLog | None) -> None:
        super().__init__(f"{name}@{ranges[0].first_offset}")
        self.ranges, self.vhost, self.name, self.kind, self.bounds = ranges, vhost, name, kind, bounds
        self.remote = remote

    def batches(self) -> Iterator[Any]:
        for r in self.ranges:
            if self.remote is None:
                yield from range_batches(r, self.vhost, self.name, self.bounds)
            else:
                yield from buffer_batches(self.remote.fetch(self.kind, self.vhost, self.name, r), self.vhost,
                                          self.name, self.bounds)


def _merged(ranges: list[RemoteRange]) -> list[RemoteRange]:
    """Adjacent ranges of one segment as one: one request instead of several."""
    out: list[RemoteRange] = []
    for r in ranges:
        last = out[-1] if out else None
        if last is not None and last.segment == r.segment and last.stop == r.start:
            out[-1] = RemoteRange(r.segment, last.start, r.stop, last.first_offset, r.end_offset, last.size + r.size,
                                  r.tier)
        else:
            out.append(r)
    return out


@dataclass(slots=True)
class Source:
    """The parsed options: the logs (one, or a super stream's partitions) and where they are."""
    vhost: str
    kind: str  # "mirror" or "stream"
    names: list[str]
    bounds: Bounds
    partition_bytes: int
    root: Path | None  # the local root (data dir, or its streams dir) or None with ``remote``
    remote: RemoteLog | None
    super_stream: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Source:
        given = [key for key in NAMES if options.get(key)]
        if len(given) != 1:
            raise ValueError("the headrace source reads one log: give one of the options 'exchange', 'stream' or "
                             "'superStream'" + (f", not {' and '.join(given)}" if given else ""))
        path, url = options.get("path"), options.get("url")
        if bool(path) == bool(url):
            raise ValueError("the headrace source needs 'url' (the broker's HTTP API, with 'user' and 'password') "
                             "or 'path' (the broker's data directory, on its own machine), one of them")
        key = given[0]
        vhost = options.get("vhost") or "/"
        kind = "mirror" if key == "exchange" else "stream"
        tier_read = (options.get("tierRead") or "direct").lower()
        if tier_read not in ("direct", "broker"):
            raise ValueError(f"the headrace source's option 'tierRead' is 'direct' or 'broker', got {tier_read!r}")
        remote = RemoteLog(url, options.get("user") or "guest", options.get("password") or "guest",
                           options.get("caFile") or None, tier_read == "direct") if url else None
        root = None if path is None or url else (Path(path) / STREAMS_DIR if kind == "stream" else Path(path))
        name = options[key]
        names = [name]
        if key == "superStream":
            names = remote.super_stream_partitions(vhost, name) if remote is not None \
                else local_partitions(root, vhost, name)  # type: ignore[arg-type]
        bounds = Bounds(_int(options.get("fromOffset")), _int(options.get("toOffset")),
                        _time_ms(options.get("fromTime")), _time_ms(options.get("toTime")),
                        options.get("routingKey") or None)
        size = _int(options.get("partitionBytes")) or DEFAULT_PARTITION_BYTES
        return cls(vhost, kind, names, bounds, max(size, 1), root, remote,
                   name if key == "superStream" else None)

    def _ranges(self, name: str, bounds: Bounds) -> list[Any]:
        b = {"from_offset": bounds.from_offset, "to_offset": bounds.to_offset, "from_ts": bounds.from_ts,
             "to_ts": bounds.to_ts}
        if self.remote is not None:
            return self.remote.ranges(self.kind, self.vhost, name, self.partition_bytes, **b)
        assert self.root is not None
        return read_ranges(self.root, self.vhost, name, target_bytes=self.partition_bytes, **b)

    def partitions(self, bounds: dict[str, Bounds] | Bounds) -> list[LogPartition]:
        """Spark partitions of every log, ``bounds`` for all or per log name (a stream's micro-batch)."""
        out: list[LogPartition] = []
        for name in self.names:
            b = bounds if isinstance(bounds, Bounds) else bounds.get(name)
            if b is None:
                continue
            groups: list[list[Any]] = []
            size = self.partition_bytes
            for r in self._ranges(name, b):
                if size + r.size > self.partition_bytes:
                    groups.append([])
                    size = 0
                groups[-1].append(r)
                size += r.size
            for g in groups:
                out.append(LogPartition(g if self.remote is None else _merged(g), self.vhost, name, self.kind, b,
                                        self.remote))
        return out

    def next_offsets(self, since: Mapping[str, int] | None = None) -> dict[str, int]:
        """Each log's next offset (asks the broker from ``since``, so it reads only the tail's index)."""
        out = {}
        for name in self.names:
            if self.remote is not None:
                start = (since or {}).get(name)
                out[name] = int(self.remote.plan(self.kind, self.vhost, name, 1 << 40, from_offset=start)["next_offset"])
            else:
                assert self.root is not None
                out[name] = next_offset(self.root, self.vhost, name)
        return out

    def total_bytes(self) -> int:
        """Bytes of every log (for a split size), over the API or from the files."""
        if self.remote is not None:
            return sum(s["size"] for name in self.names
                       for s in self.remote.plan(self.kind, self.vhost, name, 1 << 40)["segments"])
        assert self.root is not None
        return sum(s.size for name in self.names for s in all_segments(self.root, self.vhost, name))


def local_partitions(root: Path, vhost: str, name: str) -> list[str]:
    """A super stream's partition streams as the data directory has them: ``NAME-<n>``, by n."""
    pattern = re.compile(re.escape(name) + r"-(\d+)$")
    found = sorted((int(m[1]), stream) for v, stream in list_mirrors(root) if v == vhost
                   and (m := pattern.match(stream)))
    if not found:
        raise ValueError(f"super stream '{name}' in vhost '{vhost}' has no partition stream with a log under {root}")
    return [stream for _, stream in found]

