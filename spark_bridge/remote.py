"""The broker's HTTP API as the ``headrace`` source's way to a log on another machine (option ``url``).

The driver asks ``GET /api/{mirrors|streams}/{vhost}/{name}/log`` for the log's byte ranges (cut
at sparse-index entries on the broker, pruned by the offset and time bounds); each executor then
fetches its ranges with ``GET .../segments/{base}`` and an HTTP ``Range`` header, into one buffer
that ``arrow_read.buffer_batches`` decodes as it decodes a range read from a local file. The bytes
are the segment's as they lie on disk: no per-record JSON on either side.

A refusal is raised as ``PermissionError`` with what the user lacks, any other failure as
``ConnectionError`` / ``LookupError`` with the broker's reason, so a Spark job fails with a line
that says why.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from headrace.persistence.tier_manifest import read_uri

__all__ = ["RemoteLog", "RemoteRange"]

TIMEOUT = 60.0  # seconds without progress on one request


@dataclass(frozen=True, slots=True)
class RemoteRange:
    """A byte range of one segment of a remote log (``stop`` None: to the segment's end)."""
    segment: int
    start: int
    stop: int | None
    first_offset: int
    end_offset: int | None
    size: int
    tier: str | None = None  # the segment's copy in the log's tier, where the plan names one


@dataclass(frozen=True, slots=True)
class RemoteLog:
    """One broker's HTTP API and credentials: picklable, so executors get it with their partitions.
    ``ca_file`` is the CA bundle that signed the broker's certificate (https; default: the system's).
    ``tier_direct``: a range of a segment in the log's tier is read from the tier itself when this
    machine can (the URI's file system is reachable and its credentials are there), through the
    broker otherwise; False: always through the broker."""
    url: str
    user: str
    password: str
    ca_file: str | None = None
    tier_direct: bool = True

    def _connection(self) -> http.client.HTTPConnection:
        u = urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"the headrace source's url must be http(s)://host:port, got {self.url!r}")
        if u.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_file)
            return http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=TIMEOUT, context=context)
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=TIMEOUT)

    def _request(self, path: str, what: str, headers: dict[str, str] | None = None) -> bytearray:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        prefix = urlsplit(self.url).path.rstrip("/")
        conn = self._connection()
        try:
            try:
                conn.request("GET", prefix + path, headers={"authorization": f"Basic {token}", **(headers or {})})
                response = conn.getresponse()
            except OSError as exc:
                raise ConnectionError(f"cannot reach the broker's HTTP API at {self.url}: {exc}") from None
            if response.status in (200, 206):
                return _read_all(response)
            body = response.read()
            try:
                reason = json.loads(body).get("reason", "")
            except ValueError:
                reason = body[:200].decode("utf-8", "replace")
            if response.status == 401:
                raise PermissionError(f"the broker at {self.url} refused {what} to user '{self.user}': {reason} "
                                      f"(reading a log needs the management tag and read permission on it)")
            if response.status == 404:
                raise LookupError(f"{what}: {reason}")
            raise ConnectionError(f"{what}: HTTP {response.status} from {self.url}: {reason}")
        finally:
            conn.close()

    def plan(self, kind: str, vhost: str, name: str, target_bytes: int, **bounds: int | None) -> dict[str, Any]:
        """The log's segments, next offset and ranges (``server/http/logs.py``)."""
        query = urlencode({"target_bytes": target_bytes, **{k: v for k, v in bounds.items() if v is not None}})
        what = f"the log of {'stream' if kind == 'stream' else 'exchange'} '{name}' in vhost '{vhost}'"
        doc: dict[str, Any] = json.loads(self._request(f"{_base(kind, vhost, name)}/log?{query}", what))
        return doc

    def ranges(self, kind: str, vhost: str, name: str, target_bytes: int, **bounds: int | None) -> list[RemoteRange]:
        return [RemoteRange(r["segment"], r["start"], r["stop"], r["first_offset"], r["end_offset"], r["size"],
                            r.get("tier"))
                for r in self.plan(kind, vhost, name, target_bytes, **bounds)["ranges"]]

    def fetch(self, kind: str, vhost: str, name: str, r: RemoteRange) -> bytearray:
        """The range's bytes; empty when retention dropped the segment since planning."""
        if r.tier is not None and self.tier_direct:
            try:
                return bytearray(read_uri(r.tier, r.start, r.stop))
            except OSError:
                pass  # not reachable from here: the broker reads it for us
        last = "" if r.stop is None else str(r.stop - 1)
        try:
            return self._request(f"{_base(kind, vhost, name)}/segments/{r.segment}", f"segment {r.segment} of '{name}'",
                                 {"range": f"bytes={r.start}-{last}"})
        except LookupError:
            return bytearray()

    def super_stream_partitions(self, vhost: str, name: str) -> list[str]:
        path = f"/api/super-streams/{quote(vhost, safe='')}/{quote(name, safe='')}"
        doc = json.loads(self._request(path, f"super stream '{name}' in vhost '{vhost}'"))
        return [p["name"] for p in doc["partitions"]]


def _base(kind: str, vhost: str, name: str) -> str:
    return f"/api/{'streams' if kind == 'stream' else 'mirrors'}/{quote(vhost, safe='')}/{quote(name, safe='')}"


def _read_all(response: http.client.HTTPResponse) -> bytearray:
    """The body into one preallocated buffer (``readinto``: no list of chunks joined at the end)."""
    length = response.getheader("content-length")
    if length is None:
        return bytearray(response.read())
    buf = bytearray(int(length))
    view = memoryview(buf)
    pos = 0
    while pos < len(buf):
        n = response.readinto(view[pos:])
        if not n:
            raise ConnectionError(f"the broker closed the connection after {pos} of {len(buf)} bytes")
        pos += n
    return buf
