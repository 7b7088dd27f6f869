"""A follower's client ports: each connection is forwarded, byte for byte, to the leader's same
port, so a client configured with one node's address reaches the leader through any node.

Owner: one ``Forwarder`` per follower period holds the leader's address and the forwarded
connections' nursery; the node (``cluster_node.py``) cancels it when the leader changes, which
closes every forwarded connection (the clients reconnect, and reach the new leader).
"""

from __future__ import annotations

import logging

import trio

__all__ = ["Forwarder"]

log = logging.getLogger("headrace.cluster")

# one read's bytes per direction: a frame batch of a busy client
PIPE_BYTES = 1 << 16
CONNECT_TIMEOUT = 2.0


class Forwarder:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.connections = 0

    async def handle(self, client: trio.abc.Stream) -> None:
        upstream: trio.abc.Stream | None = None
        with trio.move_on_after(CONNECT_TIMEOUT):
            try:
                upstream = await trio.open_tcp_stream(self.host, self.port)
            except OSError as exc:
                log.info("cannot reach the leader at %s:%d: %s", self.host, self.port, exc)
        if upstream is None:
            await trio.aclose_forcefully(client)
            return
        self.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pipe, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_pipe, upstream, client, nursery.cancel_scope)
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(client)


async def _pipe(source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(PIPE_BYTES):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    scope.cancel()
