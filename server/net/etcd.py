"""A small etcd v3 client over etcd's JSON gateway (``/v3/...``, base64 keys and values).

Owner: one ``EtcdClient`` per cluster agent; it owns its HTTP connections and which endpoint it
is talking to. Nothing else talks to etcd.

Why the JSON gateway through httpx rather than gRPC or hand-made HTTP: etcd serves the gateway
on its client port in every 3.x (Debian's 3.4 included), so no generated code and no extra
dependency; httpx is already the CLI's HTTP client, its ``AsyncClient`` runs on trio, and it
handles keep-alive connections, chunked streams (the watch) and timeouts, which an h11 loop of
our own would have to redo. It is imported only when a cluster is configured, so a standalone
broker does not load it.

Failover: a request that cannot reach its endpoint (connection refused, timeout, a 5xx of an
etcd that lost its quorum) goes to the next endpoint in turn; once every endpoint failed, the
call raises ``EtcdUnavailable`` with one line naming them, for the caller to print and exit on
at start, or to count against the lease's safety margin later. Any other error of etcd's
(a lease not found, a malformed request) is ``EtcdError`` with etcd's own message.

The watch is a bounded long-poll: ``watch`` opens the stream at a revision, returns the first
batch of events (or none once ``timeout`` passes) and closes it. Each call names its start
revision, so nothing between two calls is missed, and a dead endpoint costs one timeout.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import httpx
import trio

from headrace.server.cluster.etcd_model import (
    Compare,
    Delete,
    Get,
    KeyValue,
    Put,
    RequestOp,
    TxnResult,
    WatchEvent,
    prefix_end,
)

__all__ = ["EtcdClient", "EtcdCompacted", "EtcdError", "EtcdUnavailable", "LeaseNotFound"]

# gRPC codes (in the gateway's error body) that mean "this member cannot answer now, try another"
_RETRY_CODES = frozenset({4, 14})  # DEADLINE_EXCEEDED, UNAVAILABLE
_NOT_FOUND = 5


class EtcdError(Exception):
    """etcd answered with an error (its message is the text)."""


class EtcdUnavailable(EtcdError):
    """No endpoint answered."""


class LeaseNotFound(EtcdError):
    """The lease expired or was revoked."""


class EtcdCompacted(EtcdError):
    """A watch asked for a revision etcd has compacted away; read the keys again."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (etcd keeps from {compact_revision})")
        self.compact_revision = compact_revision


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _kv(raw: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=base64.b64decode(raw.get("key", "")),
        value=base64.b64decode(raw.get("value", "")),
        create_revision=int(raw.get("create_revision", 0)),
        mod_revision=int(raw.get("mod_revision", 0)),
        version=int(raw.get("version", 0)),
        lease=int(raw.get("lease", 0)),
    )


def _range_body(key: bytes, prefix: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key)}
    if prefix:
        body["range_end"] = _b64(prefix_end(key))
    return body


def _op(op: RequestOp) -> dict[str, Any]:
    if isinstance(op, Put):
        put: dict[str, Any] = {"key": _b64(op.key), "value": _b64(op.value)}
        if op.lease:
            put["lease"] = str(op.lease)
        return {"request_put": put}
    if isinstance(op, Get):
        return {"request_range": _range_body(op.key, op.prefix)}
    return {"request_delete_range": _range_body(op.key, op.prefix)}


def _compare(c: Compare) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(c.key), "target": c.target, "result": c.result}
    if c.target == "VALUE":
        assert isinstance(c.operand, bytes)
        body["value"] = _b64(c.operand)
    else:
        assert isinstance(c.operand, int)
        body[{"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version"}[c.target]] = str(c.operand)
    return body


def _revision(body: dict[str, Any]) -> int:
    return int(body.get("header", {}).get("revision", 0))


class EtcdClient:
    """Calls to etcd through the first endpoint that answers. ``timeout`` bounds each request."""

    def __init__(self, endpoints: Sequence[str], timeout: float = 2.0) -> None:
        cleaned = [e.strip().rstrip("/") for e in endpoints if e.strip()]
        if not cleaned:
            raise ValueError("no etcd endpoint given")
        self.endpoints = cleaned
        self.timeout = timeout
        self._current = 0
        self._http = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _error(self, response: httpx.Response) -> EtcdError:
        try:
            body = response.json()
            message, code = str(body.get("message") or body.get("error")), int(body.get("code", -1))
        except (ValueError, AttributeError):
            message, code = response.text.strip()[:200], -1
        if code == _NOT_FOUND and "lease" in message:
            return LeaseNotFound(message)
        if code in _RETRY_CODES or response.status_code >= 500:
            return EtcdUnavailable(f"{response.url}: {message}")
        return EtcdError(message)

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the current endpoint, then on each next one that fails."""
        failures: list[str] = []
        for attempt in range(len(self.endpoints)):
            endpoint = self.endpoints[(self._current + attempt) % len(self.endpoints)]
            try:
                response = await self._http.post(endpoint + path, json=body)
            except httpx.HTTPError as exc:
                failures.append(f"{endpoint}: {exc.__class__.__name__} {exc}".rstrip())
                continue
            if response.status_code == 200:
                self._current = (self._current + attempt) % len(self.endpoints)
                result: dict[str, Any] = response.json()
                return result
            error = self._error(response)
            if not isinstance(error, EtcdUnavailable):
                raise error
            failures.append(str(error))
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable("no etcd endpoint answered (" + "; ".join(failures) + ")")

    # leases

    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease of ``ttl`` seconds: (its id, the TTL etcd gave)."""
        body = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        if body.get("error"):
            raise EtcdError(str(body["error"]))
        return int(body["ID"]), int(body["TTL"])

    async def keep_alive(self, lease: int) -> int:
        """Renew ``lease`` once: the TTL it has again. ``LeaseNotFound`` once it expired."""
        body = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        ttl = int(body.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseNotFound(f"lease {lease:x} expired")
        return ttl

    async def revoke(self, lease: int) -> None:
        """Give ``lease`` up: the keys under it go at once. An expired lease is no error."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except LeaseNotFound:
            pass

    # keys

    async def get(self, key: bytes, prefix: bool = False) -> tuple[tuple[KeyValue, ...], int]:
        """The keys at ``key`` (or under it), and the store's revision they were read at."""
        body = await self._call("/v3/kv/range", _range_body(key, prefix))
        return tuple(_kv(kv) for kv in body.get("kvs", ())), _revision(body)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        body = await self._call("/v3/kv/put", _op(Put(key, value, lease))["request_put"])
        return _revision(body)

    async def delete(self, key: bytes, prefix: bool = False) -> int:
        """Delete the key (or every key under it): how many went."""
        body = await self._call("/v3/kv/deleterange", _range_body(key, prefix))
        return int(body.get("deleted", 0))

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[RequestOp], failure: Sequence[RequestOp] = ()
    ) -> TxnResult:
        body = await self._call("/v3/kv/txn", {
            "compare": [_compare(c) for c in compare],
            "success": [_op(op) for op in success],
            "failure": [_op(op) for op in failure],
        })
        ranges = tuple(
            tuple(_kv(kv) for kv in r.get("response_range", {}).get("kvs", ()))
            for r in body.get("responses", ())
        )
        return TxnResult(bool(body.get("succeeded", False)), _revision(body), ranges)

    # watch

    async def watch(
        self, key: bytes, start_revision: int, timeout: float, prefix: bool = False
    ) -> tuple[tuple[WatchEvent, ...], int]:
        """Events on ``key`` (or under it) from ``start_revision`` on: the first batch etcd sends,
        or none after ``timeout`` seconds. Also the revision to watch from next time."""
        request = {"create_request": {**_range_body(key, prefix), "start_revision": str(start_revision)}}
        next_revision = start_revision
        failures: list[str] = []
        for attempt in range(len(self.endpoints)):
            endpoint = self.endpoints[(self._current + attempt) % len(self.endpoints)]
            try:
                with trio.move_on_after(timeout):
                    async with self._http.stream(
                        "POST", endpoint + "/v3/watch", json=request,
                        timeout=httpx.Timeout(self.timeout, read=timeout + self.timeout),
                    ) as response:
                        if response.status_code != 200:
                            await response.aread()
                            raise self._error(response)
                        self._current = (self._current + attempt) % len(self.endpoints)
                        async for line in response.aiter_lines():
                            if not line.strip():
                                continue
                            result = json.loads(line).get("result", {})
                            if int(result.get("compact_revision", 0)):
                                raise EtcdCompacted(int(result["compact_revision"]))
                            events = tuple(
                                WatchEvent("DELETE" if e.get("type") == "DELETE" else "PUT", _kv(e.get("kv", {})))
                                for e in result.get("events", ())
                            )
                            if events:
                                last = max(e.kv.mod_revision for e in events)
                                return events, last + 1
                return (), next_revision
            except (httpx.HTTPError, EtcdUnavailable) as exc:
                failures.append(f"{endpoint}: {exc.__class__.__name__} {exc}".rstrip())
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable("no etcd endpoint answered (" + "; ".join(failures) + ")")
