"""The node's name as RabbitMQ's tools and messages show it (``rabbit@host`` there): one node, one
name, the same in the management API, the Prometheus identity and the firehose's ``node`` header."""

from __future__ import annotations

__all__ = ["NODE_NAME"]

NODE_NAME = "headrace@localhost"
