"""Consumer groups on streams and super streams, as the HTTP API, the console and ``/metrics`` show
them: per partition, the active member, the group's committed offset and its lag.

Rule: nothing here is kept. Each stream queue owns its groups (``StreamQueue.groups`` and its
tracked offsets, read through ``Destination.describe_groups``); a super stream's partitions are its
exchange's (``SuperStreamExchange.partitions``). This module only puts the two together: a group
on a super stream is one entry with a row per partition, in partition order; a group on a stream
that is no super stream's partition is one entry with one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headrace.exchanges import SuperStreamExchange
from headrace.queues import Destination, GroupPosition

from .vhost import VHost

__all__ = ["GroupView", "PartitionView", "groups_of", "stream_groups"]


@dataclass(slots=True)
class PartitionView:
    stream: str
    partition: int  # the partition's order in its super stream (0 for a stream alone)
    position: GroupPosition | None  # None: the group never read this partition (lag: all of it)
    lag: int


@dataclass(slots=True)
class GroupView:
    vhost: str
    name: str  # the group: the consumers' x-stream-consumer-name
    stream: str  # the super stream's name, or the stream's
    super_stream: bool
    partitions: list[PartitionView] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def members(self) -> int:
        """Members consume every partition, so the most any partition has."""
        return max((p.position.members for p in self.partitions if p.position is not None), default=0)


def groups_of(vhost: VHost, exchange: SuperStreamExchange) -> list[GroupView]:
    """The groups on super stream ``exchange``, by name, each with a row for every partition."""
    orders = exchange.partition_orders()
    logs: list[tuple[str, int, Destination]] = []
    for _, stream in exchange.partitions():
        queue = vhost.queues.get(stream)
        if queue is not None and queue.is_log:
            logs.append((stream, orders.get(stream, 0), queue))
    found: dict[str, dict[str, GroupPosition]] = {}
    for stream, _, queue in logs:
        for position in queue.describe_groups():
            found.setdefault(position.group, {})[stream] = position
    views = []
    for name in sorted(found):
        view = GroupView(vhost.name, name, exchange.name, True)
        for stream, order, queue in logs:
            found_here = found[name].get(stream)
            view.partitions.append(PartitionView(stream, order, found_here,
                                                 queue.messages_ready if found_here is None else found_here.lag))
        views.append(view)
    return views


def stream_groups(vhost: VHost, stream: str | None = None) -> list[GroupView]:
    """Every group in ``vhost`` (or only those on super stream or stream ``stream``): super streams'
    first, by name, then those on streams that are no partition."""
    views: list[GroupView] = []
    partitions: set[str] = set()
    for name, exchange in sorted(vhost.exchanges.items()):
        if isinstance(exchange, SuperStreamExchange):
            partitions.update(dest for _, dest in exchange.partitions())
            if stream is None or stream == name:
                views.extend(groups_of(vhost, exchange))
    for name, queue in sorted(vhost.queues.items()):
        if name in partitions or (stream is not None and stream != name):
            continue
        for position in queue.describe_groups():
            view = GroupView(vhost.name, position.group, name, False)
            view.partitions.append(PartitionView(name, 0, position, position.lag))
            views.append(view)
    return views
