"""A mirror's or a stream's log over HTTP, for readers on other machines (the Spark bridge's ``url``).

``GET /api/mirrors/{vhost}/{name}/log`` (``/api/streams/...`` for a stream queue) plans a read:
the segments with their base offsets and sizes, the next offset, and the log cut into byte ranges
of about ``target_bytes`` at sparse-index entries (``mirror_reader.read_ranges``), pruned by
``from_offset``/``to_offset``/``from_ts``/``to_ts``. ``GET .../segments/{base}`` sends a segment's
bytes as they are on disk, all of it or the part an HTTP ``Range: bytes=a-b`` header (or the
``start``/``stop`` query parameters, stop exclusive) asks for; the client decodes the records
itself, so nothing here builds a per-record object. A sealed segment never changes and the active
one only grows, so a range planned earlier still holds whole records; an open-ended read gets the
segment as long as it is when the shell opens it (a torn last record is the reader's to drop).

Both need ``read`` permission on the exchange (queue) and the management or administrator tag, as
any read of message contents through the API does. The handlers are sync and touch no file: the
shell (``net/http_logs.py``) lists the segments and sends the bytes.
"""

from __future__ import annotations

import re

from headrace.server.broker import VHost

from .routes import Context, HTTPError, LogSlice, Request, Response, Routes, json_response

__all__ = ["DEFAULT_TARGET_BYTES", "routes"]

routes = Routes()

DEFAULT_TARGET_BYTES = 32 << 20
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_WHAT = {"mirror": "mirrored exchange", "stream": "stream"}


def _int_arg(req: Request, name: str) -> int | None:
    value = req.arg(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise HTTPError(400, "bad_request", f"{name} must be an integer, got {value!r}") from None


@routes.get("/api/mirrors/{vhost}/{name}/log", reader=True, perms=[("read", "name")], params={"kind": "mirror"})
@routes.get("/api/streams/{vhost}/{name}/log", reader=True, perms=[("read", "name")], params={"kind": "stream"})
def log_plan(ctx: Context, req: Request, vhost: VHost, name: str, kind: str) -> Response:
    target = _int_arg(req, "target_bytes") or DEFAULT_TARGET_BYTES
    if target < 1:
        raise HTTPError(400, "bad_request", "target_bytes must be positive")
    bounds = {key: _int_arg(req, key) for key in ("from_offset", "to_offset", "from_ts", "to_ts")}
    plan = ctx.log_plan(kind, vhost.name, name, target, bounds)
    if plan is None:
        raise HTTPError(404, "not_found", f"{_WHAT[kind]} '{name}' in vhost '{vhost.name}' has no log on this broker")
    return json_response(200, plan)


@routes.get("/api/mirrors/{vhost}/{name}/segments/{base}", reader=True, perms=[("read", "name")],
            params={"kind": "mirror"})
@routes.get("/api/streams/{vhost}/{name}/segments/{base}", reader=True, perms=[("read", "name")],
            params={"kind": "stream"})
def segment_bytes(ctx: Context, req: Request, vhost: VHost, name: str, base: str, kind: str) -> Response:
    if not base.isdigit():
        raise HTTPError(400, "bad_request", f"segment base offset must be an integer, got {base!r}")
    header = req.headers.get("range")
    if header is not None:
        match = _RANGE.match(header.strip())
        if match is None:
            raise HTTPError(416, "range_not_satisfiable", f"only one 'bytes=start-[end]' range is served, got {header!r}")
        start, stop = int(match[1]), int(match[2]) + 1 if match[2] else None
        status = 206
    else:
        start, stop = _int_arg(req, "start") or 0, _int_arg(req, "stop")
        status = 200
    if start < 0 or stop is not None and stop < start:
        raise HTTPError(416, "range_not_satisfiable", f"empty or reversed range {start}-{stop}")
    return Response(status, content_type="application/octet-stream",
                    file=LogSlice(kind, vhost.name, name, int(base), start, stop))
