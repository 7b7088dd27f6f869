"""The JSON of connections, channels, consumers, bindings and a queue's statistics, with the field
names RabbitMQ's management API uses, so tools written against it (rabbitmqadmin, exporters, the
console) find what they look for.

Fields that only a clustered Erlang node has get honest single-node values: one ``node``, no
garbage collection or reductions, empty per-exchange breakdowns where headrace keeps no such
counters. Nothing here samples a clock: times come from the sessions and queues.
"""

from __future__ import annotations

import time
from typing import Any

from headrace.exchanges import Binding
from headrace.queues import Consumer, Destination
from headrace.server.broker import VHost
from headrace.server.broker.node import connection_label

from headrace.server.amqp.properties import decode_properties

from .listing import rated
from .node_facts import NODE_NAME
from .rates import DEPTH, QUEUE_DEPTH_AT, QUEUE_STATS, VHOST_STATS, queue_counts
from .routes import Context, Request, user_of

__all__ = ["DEFAULT_EXCHANGE", "binding_json", "channel_json", "connection_basic_json", "connection_json",
           "connection_name", "consumer_json", "default_binding_json", "exchange_name", "head_timestamp",
           "queue_detail_json", "queue_stats_json", "rabbit_time", "visible_sessions"]

# Erlang's scheduler work and garbage collection: no such thing here
# no Erlang reductions here: zero, and no samples to draw (RabbitMQ's UI charts every *_details it
# finds and needs a samples list in each)
NO_REDUCTIONS: dict[str, Any] = {"reductions": 0, "reductions_details": {"rate": 0.0, "samples": []},
                                 "garbage_collection": {}}
TIMESTAMP_FLAG = 1 << 6  # the timestamp property's bit, in the low byte of the first flag word


def rabbit_time(seconds: float) -> str:
    """RabbitMQ 3.10's timestamp format for ``idle_since`` and the like: RFC 3339 with
    milliseconds, in UTC (``2026-11-24T13:35:39.003+00:00``)."""
    millis = int(seconds * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}+00:00"


def _safe(value: Any) -> Any:
    """Client properties as JSON: byte strings decoded (undecodable bytes replaced)."""
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def visible_sessions(ctx: Context, req: Request) -> list[Any]:
    """Open connections the user may see: their own, or all for monitoring and administrators."""
    user = user_of(req)
    return [s for s in ctx.broker.connections.values()
            if s.user is not None and (user.can_monitor or s.user.name == user.name)]


def connection_name(s: Any) -> str:
    """RabbitMQ's name for a connection, ``peer -> listener`` (``127.0.0.1:39884 -> 127.0.0.1:5672``):
    unique while the connection lives (a TCP connection's four addresses), and what tools that
    close or look up connections by name expect."""
    return connection_label(s.peer, s.local)


def connection_basic_json(s: Any) -> dict[str, Any]:
    """A connection as ``disable_stats=true`` lists it (RabbitMQ's basic info)."""
    return {"name": connection_name(s), "node": NODE_NAME, "user": s.user.name, "vhost": s.vhost.name}


def connection_json(ctx: Context, s: Any) -> dict[str, Any]:
    props = _safe(s.client_properties)
    conn = s.conn
    io = s.io
    octets = rated(ctx, ("connection", s.id), ("recv_oct", "send_oct"), (io.recv_oct, io.send_oct), ages="data_rates")
    return {
        "name": connection_name(s), "id": s.id, "node": NODE_NAME, "type": "network", "state": "running",
        "protocol": "AMQP 0-9-1", "user": s.user.name, "vhost": s.vhost.name, "auth_mechanism": "PLAIN",
        "host": s.local[0], "port": s.local[1], "peer_host": s.peer[0], "peer_port": s.peer[1], "ssl": s.ssl,
        "channels": len(s.channels), "channel_max": getattr(conn, "channel_max", 0),
        "frame_max": getattr(conn, "frame_max", 0), "timeout": getattr(conn, "heartbeat", 0),
        "client_properties": props, "user_provided_name": props.get("connection_name"),
        "connected_at": int(s.connected_at * 1000),
        **octets, "recv_cnt": io.recv_cnt, "send_cnt": io.send_cnt, "send_pend": conn.bytes_pending,
        # TLS details: RabbitMQ's fields, null as RabbitMQ gives them on a plain connection (and here
        # for TLS too: the shell does not keep the negotiated cipher)
        "ssl_protocol": None, "ssl_key_exchange": None, "ssl_cipher": None, "ssl_hash": None,
        "peer_cert_subject": None, "peer_cert_issuer": None, "peer_cert_validity": None,
        "user_who_performed_action": s.user.name, **NO_REDUCTIONS,
    }


IDLE_AFTER = 5.0  # seconds without activity before a queue or channel reads as idle


def idle_since(last_used: float, now: float) -> dict[str, str]:
    """RabbitMQ sends ``idle_since`` only for an idle queue or channel (its process hibernated after
    a while without work), and its UI shows "idle" whenever the key is there: so only after
    ``IDLE_AFTER`` seconds without activity."""
    return {"idle_since": rabbit_time(last_used)} if now - last_used >= IDLE_AFTER else {}


def _channel_name(s: Any, ch: Any) -> str:
    return f"{connection_name(s)} ({ch.id})"  # as RabbitMQ: the connection's name, then the number


def channel_details(s: Any, ch: Any) -> dict[str, Any]:
    return {"name": _channel_name(s, ch), "number": ch.id, "connection_name": connection_name(s),
            "peer_host": s.peer[0], "peer_port": s.peer[1], "user": s.user.name, "node": NODE_NAME}


def channel_json(ctx: Context, s: Any, ch: Any, *, detailed: bool = False) -> dict[str, Any]:
    out = {
        "name": _channel_name(s, ch), "node": NODE_NAME, "connection": s.id, "number": ch.id,
        "user": s.user.name, "vhost": s.vhost.name, "state": "running" if ch.active else "flow",
        "connection_details": {"name": connection_name(s), "peer_host": s.peer[0], "peer_port": s.peer[1]},
        "consumer_count": len(ch.consumers), "confirm": ch.confirm, "transactional": ch.tx,
        "prefetch_count": ch.prefetch_count, "global_prefetch_count": ch.global_prefetch,
        "messages_unacknowledged": len(ch.unacked) + ch.txn.taken, "messages_unconfirmed": len(ch.pending_confirms),
        "messages_uncommitted": len(ch.txn.publishes), "acks_uncommitted": len(ch.txn.settlements),
        "message_stats": rated(ctx, ("channel", s.id, ch.id), VHOST_STATS, ch.stats.counts(ch.next_tag - 1)),
        **idle_since(s.now or ctx.now, ctx.now), "pending_raft_commands": 0,
        "user_who_performed_action": s.user.name, **NO_REDUCTIONS,
    }
    if detailed:
        out["consumer_details"] = [consumer_json(s.vhost, q.name, c) for q, c in ch.consumers.values()]
        out["deliveries"] = []
        out["publishes"] = []
    return out


def consumer_json(vhost: VHost, queue: str, c: Consumer[Any]) -> dict[str, Any]:
    sink = c.sink
    session = getattr(sink, "session", None)
    details: dict[str, Any] = (channel_details(session, sink) if session is not None and session.user is not None
                               else {"name": str(c.tag), "number": c.channel_id})
    return {"consumer_tag": c.tag, "queue": {"name": queue, "vhost": vhost.name}, "channel_details": details,
            "ack_required": not c.no_ack, "exclusive": c.exclusive, "prefetch_count": c.prefetch,
            "priority": c.priority, "channel": c.channel_id, "unacked": c.unacked,
            "arguments": dict(c.arguments) if c.arguments else {}, "active": True, "activity_status": "up"}


DEFAULT_EXCHANGE = "amq.default"  # the management API's name for the nameless default exchange


def exchange_name(name: str) -> str:
    """The exchange a management API path names: ``amq.default`` is the default exchange ("")."""
    return "" if name == DEFAULT_EXCHANGE else name


def default_binding_json(vhost: VHost, queue: str) -> dict[str, Any]:
    """The default exchange's implicit binding of ``queue`` by its own name: RabbitMQ lists one per
    queue in the binding lists (the vhost's, the queue's, amq.default's) and never exports it."""
    return {"source": "", "vhost": vhost.name, "destination": queue, "destination_type": "queue",
            "routing_key": queue, "arguments": {}, "properties_key": queue}


def binding_json(vhost: VHost, b: Binding) -> dict[str, Any]:
    return {"source": b.source, "vhost": vhost.name, "destination": b.destination,
            "destination_type": b.kind.value, "routing_key": b.routing_key, "arguments": b.arguments_dict(),
            "properties_key": b.properties_key}


def queue_stats_json(ctx: Context, vhost: VHost, q: Destination) -> dict[str, Any]:
    """A queue's statistics, the part ``disable_stats=true`` leaves out (and with it the cost of
    sampling its rates)."""
    s = q.stats
    consumers = q.consumers()
    exclusive = next((c.tag for c in consumers if c.exclusive), None)
    ready, unacked = q.messages_ready, q.messages_unacked
    depth = rated(ctx, ("queue", vhost.name, q.name), DEPTH, (ready + unacked, ready, unacked), ages="lengths",
                  signed=True, column=QUEUE_DEPTH_AT)
    out = {
        "consumers": len(consumers), "consumer_capacity": 1.0 if consumers else 0.0,
        "consumer_utilisation": 1.0 if consumers else 0.0, "exclusive_consumer_tag": exclusive,
        "single_active_consumer_tag": None, "memory": q.memory,
        **{name: value for name, value in depth.items() if name.endswith("_details")},
        "message_bytes": q.message_bytes_ready + q.message_bytes_unacked,
        "message_bytes_ready": q.message_bytes_ready, "message_bytes_unacknowledged": q.message_bytes_unacked,
        "message_bytes_persistent": 0,
        "message_bytes_ram": q.message_bytes_ready + q.message_bytes_unacked - q.spilled_bytes(),
        "messages_persistent": 0, "messages_ram": ready + unacked - q.spilled_count(),
        "messages_ready_ram": ready - q.spilled_count(), "messages_unacknowledged_ram": unacked,
        "messages_paged_out": q.spilled_count(), "message_bytes_paged_out": q.spilled_bytes(),
        "spilled": q.spilled_count(),
        "head_message_timestamp": head_timestamp(q),
        "message_stats": rated(ctx, ("queue", vhost.name, q.name), QUEUE_STATS, queue_counts(s)),
        "backing_queue_status": {"mode": "default", "len": ready, "q1": 0, "q2": 0, "q3": 0, "q4": ready,
                                 "delta": ["delta", "undefined", q.spilled_count(), 0, "undefined"],
                                 "version": 1},
        "recoverable_slaves": None, **idle_since(q.last_used, ctx.now), **NO_REDUCTIONS,
    }
    return out


def head_timestamp(q: Destination) -> int | None:
    """The ``timestamp`` property of the message at the queue's head (RabbitMQ's
    ``head_message_timestamp``): None when the queue is empty or that message has none. Only
    the head's properties are decoded, once per rendering."""
    head = q.head()  # a stream queue holds no ready entries: None
    if head is None:
        return None
    raw = head.message.props_raw
    if len(raw) < 2 or not raw[1] & TIMESTAMP_FLAG:  # no timestamp: nothing to decode
        return None
    return decode_properties(raw).timestamp


def queue_detail_json(ctx: Context, vhost: VHost, q: Destination) -> dict[str, Any]:
    """What a single queue's GET (and ``/api/queues/detailed``) adds: its consumers, and the
    per-exchange and per-channel breakdowns, empty as RabbitMQ's are in its default (basic)
    rates mode, where only per-object totals are kept."""
    return {"consumer_details": [consumer_json(vhost, q.name, c) for c in q.consumers()],
            "incoming": [], "deliveries": []}
