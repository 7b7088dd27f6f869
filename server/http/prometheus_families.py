"""The ``rabbitmq_prometheus`` plugin's families as headrace fills them, shared by ``/metrics``,
``/metrics/per-object`` (``prometheus.py``) and ``/metrics/detailed`` (``prometheus_detailed.py``):
one table of each, so the three endpoints name and compute a family the same way.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

from headrace.queues import Destination

from .metrics import escape_label
from .node_facts import NODE_NAME

__all__ = ["CHURN_FAMILIES", "CONTENT_TYPE", "QUEUE_FAMILIES", "family_lines", "identity_labels"]

CONTENT_TYPE = "text/plain; version=0.0.4"
# (family, help, value of one queue): the queue families, summed node-wide or one sample a queue
QUEUE_FAMILIES: tuple[tuple[str, str, Callable[[Destination], float]], ...] = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", lambda q: q.messages_ready),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged",
     lambda q: q.messages_unacked),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth",
     lambda q: q.messages_ready + q.messages_unacked),
    ("rabbitmq_queue_consumers", "Consumers on a queue", lambda q: q.consumer_count),
    ("rabbitmq_queue_messages_bytes", "Size in bytes of ready and unacknowledged messages",
     lambda q: q.message_bytes_ready + q.message_bytes_unacked),
    ("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", lambda q: q.message_bytes_ready),
    ("rabbitmq_queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages",
     lambda q: q.message_bytes_unacked),
    ("rabbitmq_queue_messages_ram", "Ready and unacknowledged messages stored in memory",
     lambda q: q.messages_ready + q.messages_unacked - q.spilled_count()),
    ("rabbitmq_queue_messages_paged_out", "Messages paged out to disk", lambda q: q.spilled_count()),
    ("rabbitmq_queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk",
     lambda q: q.spilled_bytes()),
    ("rabbitmq_queue_process_memory_bytes", "Memory in bytes used by the Erlang queue process",
     lambda q: q.memory),
)

# (family, the broker's churn counter, help): the plugin's connection_churn_metrics
CHURN_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rabbitmq_connections_opened_total", "connection_created", "Total number of connections opened"),
    ("rabbitmq_connections_closed_total", "connection_closed", "Total number of connections closed or terminated"),
    ("rabbitmq_channels_opened_total", "channel_created", "Total number of channels opened"),
    ("rabbitmq_channels_closed_total", "channel_closed", "Total number of channels closed"),
    ("rabbitmq_queues_declared_total", "queue_declared", "Total number of queues declared"),
    ("rabbitmq_queues_created_total", "queue_created", "Total number of queues created"),
    ("rabbitmq_queues_deleted_total", "queue_deleted", "Total number of queues deleted"),
)


def family_lines(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    """One family in the plugin's order: TYPE, HELP, then its samples."""
    lines.append(f"# TYPE {name} {kind}")
    lines.append(f"# HELP {name} {help_text}")
    for labels, value in samples:
        lines.append(f"{name}{labels} {value}")


def identity_labels(cluster: str) -> str:
    return (f'{{rabbitmq_node="{NODE_NAME}",rabbitmq_cluster="{escape_label(cluster)}",'
            f'rabbitmq_cluster_permanent_id="{_cluster_id(cluster)}"}}')


def _cluster_id(name: str) -> str:
    """A stable stand-in for RabbitMQ's random cluster id: derived from the cluster name."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(name.encode()).digest()[:16]).decode().rstrip("=")
    return f"rabbitmq-cluster-id-{digest}"
