"""Super streams as a whole: add, delete and describe the objects that make one.

Rule: a super stream holds no state of its own. It is RabbitMQ's topology: the durable direct
exchange ``NAME`` declared with ``x-super-stream: true`` (``exchanges.SuperStreamExchange``, which
routes), the partition streams ``NAME-0`` .. ``NAME-(N-1)`` and the bindings between them (keys
``"0"`` .. ``"N-1"``, argument ``x-stream-partition-order``). The vhost owns each of those as it
owns any exchange, queue and binding, so this module only calls the vhost; the same objects
declared one by one over AMQP or HTTP (as RabbitMQ's tools do) make the same super stream.
"""

from __future__ import annotations

from typing import Any

from headrace.exchanges import PARTITION_ORDER, SUPER_STREAM, DestinationKind, SuperStreamExchange
from headrace.server.amqp.errors import AMQPError
from headrace.server.amqp.names import check_name

from . import errors
from .vhost import VHost

__all__ = ["MAX_PARTITIONS", "add_super_stream", "check", "delete_super_stream", "describe", "partition_names",
           "super_stream"]

# partitions of one super stream: each is a stream with its own log directory and files
MAX_PARTITIONS = 1000
QUEUE = DestinationKind.QUEUE


def super_stream(vhost: VHost, name: str) -> SuperStreamExchange:
    """The super stream ``name``'s exchange: 404 when there is none (an exchange that is not a
    super stream's is none)."""
    exchange = vhost.exchanges.get(name)
    if not isinstance(exchange, SuperStreamExchange):
        raise errors.not_found("super stream", name, vhost.name)
    return exchange


def partition_names(name: str, partitions: int) -> list[str]:
    return [f"{name}-{i}" for i in range(partitions)]


def add_super_stream(vhost: VHost, name: str, partitions: int, now: float,
                     arguments: dict[str, Any] | None = None) -> bool:
    """Create super stream ``name`` with ``partitions`` partition streams (their ``arguments``, such
    as ``x-max-age``, added to each); False when it already exists exactly so. Every check runs
    before anything is created, and a failure while creating removes what this call created."""
    if partitions < 1:  # rabbitmq-streams add_super_stream's words
        raise errors.precondition_failed("The partition number must be greater than 0")
    if partitions > MAX_PARTITIONS:
        raise errors.precondition_failed(f"The partition number must be at most {MAX_PARTITIONS}")
    check_name("super stream name", name, path_segment=True)
    streams = partition_names(name, partitions)
    for stream in streams:
        check_name("partition name", stream, path_segment=True)
    existing = vhost.exchanges.get(name)
    if isinstance(existing, SuperStreamExchange):
        problems = check(vhost, existing)
        have = [dest for _, dest in existing.partitions()]
        if have == streams and not problems:
            return False
        detail = "; ".join(problems) if problems else f"it has {len(have)} partitions, not {partitions}"
        raise errors.precondition_failed(f"super stream '{name}' in vhost '{vhost.name}' already exists: {detail}")
    if existing is not None:  # RabbitMQ's rabbit_stream_manager words
        raise errors.precondition_failed(f"there is already an exchange named {name}")
    for stream in streams:
        if stream in vhost.queues:
            raise errors.precondition_failed(f"there is already a queue named {stream}")
    stream_args = {**(arguments or {}), "x-queue-type": "stream"}
    created: list[str] = []
    try:
        vhost.declare_exchange(name, "direct", durable=True, arguments={SUPER_STREAM: True})
        for i, stream in enumerate(streams):
            vhost.declare_queue(stream, owner=None, now=now, durable=True, arguments=stream_args)
            created.append(stream)
            vhost.bind(name, stream, QUEUE, str(i), {PARTITION_ORDER: i})
    except AMQPError:
        for stream in created:
            vhost.delete_queue(stream)
        if name in vhost.exchanges:
            vhost.delete_exchange(name)
        raise
    return True


def delete_super_stream(vhost: VHost, name: str) -> list[str]:
    """Delete the exchange and the partition streams bound to it; returns their names."""
    exchange = super_stream(vhost, name)
    streams = [dest for _, dest in exchange.partitions()]
    vhost.delete_exchange(name)
    for stream in streams:
        vhost.delete_queue(stream)
    return streams


def check(vhost: VHost, exchange: SuperStreamExchange) -> list[str]:
    """What makes a super stream inconsistent: no partition, a partition order missing from
    0..N-1 (a partition stream was deleted, or bound with a wrong order), a partition that is not
    a stream."""
    problems: list[str] = []
    orders = exchange.partition_orders()
    if not orders:
        problems.append("no partition is bound")
    missing = sorted(set(range(len(orders))) - set(orders.values()))
    if missing:
        problems.append("partition order " + ", ".join(str(i) for i in missing) + " missing")
    for stream in orders:
        queue = vhost.queues.get(stream)
        if queue is not None and not queue.is_log:
            problems.append(f"partition '{stream}' is a {queue.queue_type} queue, not a stream")
    return problems


def describe(vhost: VHost, exchange: SuperStreamExchange) -> dict[str, Any]:
    """A super stream as the HTTP API lists it: its partitions in order, with their sizes."""
    orders = exchange.partition_orders()
    partitions = []
    for _, stream in exchange.partitions():
        queue = vhost.queues.get(stream)
        partitions.append({"name": stream, "order": orders.get(stream),
                           "messages": None if queue is None else queue.messages_ready})
    problems = check(vhost, exchange)
    return {"name": exchange.name, "vhost": vhost.name, "partitions": partitions,
            "partition_count": len(partitions), "consistent": not problems, "problems": problems}
