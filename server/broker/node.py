"""Names as RabbitMQ's tools and messages show them: the node's (``rabbit@host`` there; one node,
one name, the same in the management API, the Prometheus identity and the firehose's ``node``
header) and a connection's (``/api/connections`` and the firehose's ``connection`` header)."""

from __future__ import annotations

__all__ = ["NODE_NAME", "connection_label"]

NODE_NAME = "headrace@localhost"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 host in brackets


def connection_label(peer: tuple[str, int], local: tuple[str, int]) -> str:
    """RabbitMQ's name for a connection, ``peer -> listener`` (``127.0.0.1:39884 -> 127.0.0.1:5672``)."""
    return f"{_address(peer[0], peer[1])} -> {_address(local[0], local[1])}"
