"""What the management API says about this node: one node, named as ``/api/overview`` names it.

The network shell gathers the facts that need the OS or the sockets (file descriptors, bound
listeners, the TLS certificate's expiry) into a ``NodeFacts`` each time it is asked; everything here
turns them into RabbitMQ's JSON without I/O. Cluster-only fields get honest single-node values:
one node, no partitions, every feature flag of this version enabled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headrace.server.broker.node import NODE_NAME

from .rates import CHURN

__all__ = ["EXCHANGE_TYPES", "FEATURE_FLAGS", "FLAG_DOCS", "FLAG_PROVIDERS", "NODE_NAME", "RABBITMQ_API_VERSION", "Listener", "NodeFacts",
           "churn_counts", "cluster_name", "store_io_counts", "contexts_json", "listeners_json", "node_json"]

RABBITMQ_API_VERSION = "3.10.0"  # the RabbitMQ release whose management API this one follows
# protocol names as RabbitMQ lists its listeners
PROTOCOLS = {"amqp": "amqp", "amqps": "amqp/ssl", "http": "http", "https": "https", "prometheus": "http/prometheus"}
EXCHANGE_TYPES = [
    {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": True},
    {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": True},
    {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": True},
    {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": True},
    {"name": "x-delayed-message", "description": "Delayed Message Exchange", "enabled": True},
    {"name": "x-consistent-hash", "description": "Consistent Hashing Exchange", "enabled": True},
]
# RabbitMQ 3.10's flags: a single node of this version has every one of them enabled. As 3.10.8
# lists them: the plugin that provides each, and the guide some link to
FLAG_PROVIDERS = {"drop_unroutable_metric": "rabbitmq_management_agent",
                  "empty_basic_get_metric": "rabbitmq_management_agent"}
FLAG_DOCS = {"quorum_queue": "https://www.rabbitmq.com/quorum-queues.html",
             "stream_queue": "https://www.rabbitmq.com/stream.html"}
FEATURE_FLAGS = [
    ("classic_mirrored_queue_version", "Support setting version for classic mirrored queues", "3.10.0"),
    ("drop_unroutable_metric", "Count unroutable publishes to be dropped in stats", "3.8.0"),
    ("empty_basic_get_metric", "Count AMQP `basic.get` on empty queues in stats", "3.8.0"),
    ("implicit_default_bindings", "Default bindings are now implicit, instead of being stored in the database",
     "3.8.0"),
    ("maintenance_mode_status", "Maintenance mode status", "3.8.0"),
    ("quorum_queue", "Support queues of type `quorum`", "3.8.0"),
    ("stream_queue", "Support queues of type `stream`", "3.9.0"),
    ("user_limits", "Configure connection and channel limits for a user", "3.8.10"),
    ("virtual_host_metadata", "Virtual host metadata (description, tags, etc)", "3.8.0"),
]


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # amqp, amqps, http, https
    host: str
    port: int


@dataclass(slots=True)
class NodeFacts:
    started_at: float  # wall clock, seconds
    listeners: list[Listener] = field(default_factory=list)
    os_pid: int = 0
    fd_used: int = 0
    fd_total: int = 0
    processors: int = 1
    mem_limit: int = 0
    disk_free_limit: int = 0
    cert_not_after: float | None = None  # the TLS certificate's expiry, if TLS is configured
    data_dir: str = ""
    # a cluster's nodes as its leader sees them (``cluster_node.ClusterNode.status``); empty alone
    cluster: list[dict[str, Any]] = field(default_factory=list)


# RabbitMQ's node I/O and persistence keys from the message store's counts (``MessageStore.io_counts``)
STORE_IO_KEYS = (("io_write_count", "writes"), ("io_write_bytes", "write_bytes"), ("io_sync_count", "syncs"),
                 ("msg_store_write_count", "message_writes"), ("msg_store_read_count", "message_reads"),
                 ("queue_index_journal_write_count", "index_writes"))
# keys with no real figure here, always 0: the store reads through memory maps (no read(2) nor
# seeks), keeps its files open (no reopen), has no on-disk queue index to read or write in bulk,
# and does not time its calls (a clock read per write on the store path)
STORE_IO_ZERO = ("io_read_count", "io_read_bytes", "io_seek_count", "io_reopen_count", "queue_index_read_count",
                 "queue_index_write_count", "io_file_handle_open_attempt_count", "io_read_avg_time",
                 "io_write_avg_time", "io_seek_avg_time", "io_sync_avg_time", "io_file_handle_open_attempt_avg_time")


def store_io_counts(counts: dict[str, int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """RabbitMQ's names and the figures for them (``STORE_IO_KEYS``, then ``STORE_IO_ZERO``)."""
    names = tuple(name for name, _ in STORE_IO_KEYS) + STORE_IO_ZERO
    return names, tuple(counts.get(ours, 0) for _, ours in STORE_IO_KEYS) + (0,) * len(STORE_IO_ZERO)


def cluster_name(global_parameters: dict[str, Any]) -> str:
    """RabbitMQ keeps the cluster name as the global parameter ``cluster_name``; by default it is
    the node's name."""
    name = global_parameters.get("cluster_name")
    return name if isinstance(name, str) and name else NODE_NAME


def churn_counts(counters: Any) -> tuple[int, ...]:
    """Objects created and closed since the start (``broker.churn``), in ``rates.CHURN`` order."""
    extra = counters.extra
    return tuple(extra.get(name, 0) for name in CHURN)


def listeners_json(facts: NodeFacts) -> list[dict[str, Any]]:
    return [{"node": NODE_NAME, "protocol": PROTOCOLS.get(lst.name, lst.name), "ip_address": lst.host,
             "port": lst.port, "socket_opts": {}} for lst in facts.listeners]


def contexts_json(facts: NodeFacts) -> list[dict[str, Any]]:
    """The management UI's HTTP contexts, as RabbitMQ's ``contexts`` lists them."""
    return [{"node": NODE_NAME, "description": "RabbitMQ Management", "path": "/", "port": str(lst.port),
             **({"ssl": "true"} if lst.name == "https" else {})}
            for lst in facts.listeners if lst.name in ("http", "https")]


def node_json(facts: NodeFacts, *, now: float, mem_used: int, disk_free: int, alarms: frozenset[str],
              sockets_used: int) -> dict[str, Any]:
    return {
        "name": NODE_NAME, "type": "disc", "running": True, "being_drained": False, "os_pid": str(facts.os_pid),
        "uptime": int(max(0.0, now - facts.started_at) * 1000),
        "fd_used": facts.fd_used, "fd_total": facts.fd_total,
        "sockets_used": sockets_used, "sockets_total": facts.fd_total,
        "mem_used": mem_used, "mem_limit": facts.mem_limit, "mem_alarm": "memory" in alarms,
        "mem_calculation_strategy": "rss",
        "disk_free": disk_free, "disk_free_limit": facts.disk_free_limit, "disk_free_alarm": "disk" in alarms,
        # no Erlang processes here: one of Erlang's default 1048576, so the UI's bar reads as the
        # near-empty table it is rather than a full one
        "proc_used": 1, "proc_total": 1048576, "run_queue": 0, "processors": facts.processors,
        "rates_mode": "basic", "net_ticktime": 60, "partitions": [], "cluster_links": [],
        "exchange_types": EXCHANGE_TYPES,
        "auth_mechanisms": [{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism",
                             "enabled": True},
                            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True}],
        "applications": [{"name": "headrace", "description": "headrace AMQP 0-9-1 broker", "version": ""}],
        "contexts": contexts_json(facts), "listeners": listeners_json(facts),
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "log_files": [], "config_files": [], "db_dir": facts.data_dir,
        "metrics_gc_queue_length": {},
    }
