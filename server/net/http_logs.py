"""The shell's half of ``server/http/logs.py``: plans of a log's ranges and segment bytes sent from the file.

Owns no state: the logs' files belong to their writers (``MirrorWriter``, ``StreamWriter``), whose
open log's next offset is read as an int as it stands. A segment's bytes go out with ``sendfile(2)``
on a plain socket (the kernel copies from the page cache to the socket, nothing passes through
Python) and in 1 MiB ``pread``s in a worker thread through TLS. A segment whose local copy went to
the log's tier (``persistence/tier.py``) is read from its URI in a worker thread, a few MiB at a
time; plans name each segment's tier copy, so a reader that can reach the tier reads it there. Each step of a send is bounded by
the request timeout, not the whole send: a large range to a slow reader takes as long as it takes
while it moves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h11
import trio

from headrace.persistence.mirror_log import list_segments, next_offset, read_ranges
from headrace.persistence.tier_manifest import all_segments, public_uri, read_uri
from headrace.persistence.stream_log import stream_root
from headrace.server.http.routes import HTTPError, LogSlice, Response, error_response

__all__ = ["log_plan", "send_slice"]

CHUNK = 1 << 20  # bytes per pread through TLS
SENDFILE_CHUNK = 8 << 20  # bytes per sendfile call (the socket takes what fits)


def _root_and_log(app: Any, kind: str, vhost: str, name: str) -> tuple[Path, Any] | None:
    storage = getattr(app, "storage", None)
    if storage is None:
        return None
    if kind == "stream":
        return stream_root(storage.streams.data_dir), storage.streams.logs.get((vhost, name))
    return storage.mirror_writer.root, storage.mirror_writer.logs.get((vhost, name))


def log_plan(app: Any, kind: str, vhost: str, name: str, target_bytes: int,
             bounds: dict[str, int | None]) -> dict[str, Any] | None:
    """The segments, next offset and byte ranges of a log (None: no log on disk). Reads the index
    files, a few MB for a GB of log, on the event loop, as ``/api/mirrors`` stats the segments."""
    found = _root_and_log(app, kind, vhost, name)
    if found is None:
        return None
    root, open_log = found
    segments = all_segments(root, vhost, name)
    if not segments:
        return None
    following = open_log.next_offset if open_log is not None else next_offset(root, vhost, name)
    base_of = {str(s.path): s.base_offset for s in segments}
    ranges = read_ranges(root, vhost, name, target_bytes=target_bytes, **bounds)
    return {
        "kind": kind, "vhost": vhost, "name": name, "first_offset": segments[0].base_offset,
        "next_offset": following,
        "segments": [{"base_offset": s.base_offset, "size": s.size, "local": s.path.exists(), "tier": _shown(s.tier)}
                     for s in segments],
        "ranges": [{"segment": base_of[r.path], "start": r.start, "stop": r.stop, "first_offset": r.first_offset,
                    "end_offset": r.end_offset, "size": r.size, "tier": _shown(r.tier)} for r in ranges if r.path in base_of],
    }


def _shown(tier: str | None) -> str | None:
    return None if tier is None else public_uri(tier)  # a tier's credentials stay in the broker


def _open(app: Any, piece: LogSlice) -> int | None:
    found = _root_and_log(app, piece.kind, piece.vhost, piece.name)
    if found is None:
        return None
    for segment in list_segments(found[0], piece.vhost, piece.name):
        if segment.base_offset == piece.base:
            try:
                return os.open(segment.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:  # dropped by retention since it was listed
                return None
    return None


class _FileBody:
    """The body h11 passes through unchanged (``send_with_data_passthrough``): its length only."""
    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def _tier_copy(app: Any, piece: LogSlice) -> tuple[str, int] | None:
    """(URI, size) of the segment's copy in the log's tier, when its local copy is gone."""
    found = _root_and_log(app, piece.kind, piece.vhost, piece.name)
    if found is None:
        return None
    for segment in all_segments(found[0], piece.vhost, piece.name):
        if segment.base_offset == piece.base and segment.tier is not None:
            return segment.tier, segment.size
    return None


async def send_slice(app: Any, stream: trio.abc.Stream, conn: h11.Connection, response: Response,
                     server: str, closing: bool, head_only: bool, timeout: float) -> Response | None:
    """Sends the bytes ``response.file`` names; or returns the error response to send instead
    (the segment is gone, the range starts past its end) before anything was sent. A segment only
    in the log's tier is read from there in a worker thread (``TIER_CHUNK`` at a time)."""
    piece = response.file
    assert piece is not None
    fd = _open(app, piece)
    tier = _tier_copy(app, piece) if fd is None else None
    what = "stream" if piece.kind == "stream" else "mirror log"
    if fd is None and tier is None:
        return error_response(HTTPError(404, "not_found", f"{what} '{piece.name}' in vhost '{piece.vhost}' has no "
                                                          f"segment at offset {piece.base} (retention may have dropped it)"))
    try:
        size = os.fstat(fd).st_size if fd is not None else tier[1]  # type: ignore[index]
        stop = size if piece.stop is None else min(piece.stop, size)
        if piece.start > size or (response.status == 206 and piece.start >= size):
            return error_response(HTTPError(416, "range_not_satisfiable",
                                            f"range starts at {piece.start}, the segment holds {size} bytes",
                                            [("content-range", f"bytes */{size}")]))
        length = max(0, stop - piece.start)
        headers = [("content-type", response.content_type), ("content-length", str(length)), ("server", server),
                   ("accept-ranges", "bytes"), ("cache-control", "no-store")]
        if response.status == 206:
            headers.append(("content-range", f"bytes {piece.start}-{piece.start + length - 1}/{size}"))
        if closing:
            headers.append(("connection", "close"))
        with trio.fail_after(timeout):
            await stream.send_all(conn.send(h11.Response(status_code=response.status, headers=headers)))
        if not head_only and length:
            parts = conn.send_with_data_passthrough(h11.Data(data=_FileBody(length)))  # type: ignore[arg-type]
            for part in parts or ():
                if not isinstance(part, _FileBody):
                    await stream.send_all(part)
                elif fd is not None:
                    await _send_file(stream, fd, piece.start, length, timeout)
                else:
                    await _send_tier(stream, tier[0], piece.start, length, timeout)
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return None
    finally:
        if fd is not None:
            os.close(fd)


TIER_CHUNK = 4 << 20  # bytes per read from a tier (a request each on an object store)


async def _send_tier(stream: trio.abc.Stream, uri: str, start: int, length: int, timeout: float) -> None:
    pos, end = start, start + length
    while pos < end:
        data = await trio.to_thread.run_sync(read_uri, uri, pos, min(pos + TIER_CHUNK, end))
        if not data:
            raise OSError("tiered segment ended before the range did")
        with trio.fail_after(timeout):
            await stream.send_all(data)
        pos += len(data)


async def _send_file(stream: trio.abc.Stream, fd: int, start: int, length: int, timeout: float) -> None:
    sock = getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
    pos, end = start, start + length
    if sock is not None:  # plain TCP: the kernel copies page cache to socket
        out = sock.fileno()
        while pos < end:
            with trio.fail_after(timeout):
                await trio.lowlevel.wait_writable(sock)
            try:
                sent = os.sendfile(out, fd, pos, min(SENDFILE_CHUNK, end - pos))
            except BlockingIOError:
                continue
            if sent == 0:  # the file shrank under us: cannot happen to an append-only segment
                raise OSError("segment ended before the range did")
            pos += sent
        return
    while pos < end:  # TLS: the bytes must pass through the SSL object
        data = await trio.to_thread.run_sync(os.pread, fd, min(CHUNK, end - pos), pos)
        if not data:
            raise OSError("segment ended before the range did")
        with trio.fail_after(timeout):
            await stream.send_all(data)
        pos += len(data)
