"""Helpers shared by the session unit tests (imported by module name: pytest puts this folder on the path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_method_frame
from headrace.server.broker import Broker
from shell_ports import shell_ports

NOW = 1000.0  # the broker time the calls below pass


def handshake(user: str = "guest", password: str = "guest", vhost: str = "/",
              capabilities: dict[str, Any] | None = None) -> bytes:
    """What a client sends from the protocol header to channel 1 open, in one read."""
    return (b"AMQP\x00\x00\x09\x01"
            + encode_method_frame(0, m.ConnectionStartOk(capabilities or {}, "PLAIN",
                                                         f"\x00{user}\x00{password}".encode(), "en_US"))
            + encode_method_frame(0, m.ConnectionTuneOk(0, 131072, 0))
            + encode_method_frame(0, m.ConnectionOpen(vhost))
            + encode_method_frame(1, m.ChannelOpen()))


def durable_broker(backlog_max: int, **ports: Callable[..., Any]) -> Broker:
    """A broker with a store and one durable queue 'd', whose store outbox pauses publishers at
    ``backlog_max`` ops; ``ports``: real shell parts for some of its ports (``shell_ports``)."""
    b = Broker(ports=shell_ports(**ports), store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    b.vhosts["/"].declare_queue("d", now=NOW, owner=None, durable=True)
    b.store_backlog_max = backlog_max
    return b
