"""Node-wide message totals that never go down: the live queues', exchanges' and vhosts' counters
plus what the deleted ones had counted.

Owner: the broker (``Broker.retired``). The vhost hands each queue and exchange it deletes to
``queue_gone`` / ``exchange_gone``, the broker each vhost it deletes to ``vhost_gone``; the
Prometheus exposition (``server/http/prometheus.py``) reads ``node_totals``.

Why: per-object counters live and die with their object, which is right for the management API
(a queue's message_stats start at zero when it is declared again), but a Prometheus counter that
drops is read as a restart of the whole series: every ``rate()`` over a node-wide total would
show a spike each time a queue went. Keeping the deleted objects' counts costs nothing per
message; they are added once, when the object goes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Protocol

from headrace.exchanges import Exchange
from headrace.queues import Destination, QueueStats

from .queue_types import QUEUE_TYPES

__all__ = ["CountedVHost", "Retired", "VHostTotals", "add_stats", "node_totals"]

_STAT_FIELDS = tuple(f.name for f in fields(QueueStats))


class CountedVHost(Protocol):
    """What the totals read of a vhost (``vhost.VHost``, which imports this module), read-only."""

    @property
    def queues(self) -> Mapping[str, Destination]: ...
    @property
    def exchanges(self) -> Mapping[str, Exchange]: ...
    @property
    def received_confirm(self) -> int: ...
    @property
    def confirmed(self) -> int: ...
    @property
    def unroutable(self) -> int: ...
    @property
    def unroutable_returned(self) -> int: ...
    @property
    def octets_closed(self) -> list[int]: ...  # [received, sent] by its closed connections


def add_stats(into: QueueStats, stats: QueueStats) -> None:
    for name in _STAT_FIELDS:
        setattr(into, name, getattr(into, name) + getattr(stats, name))


@dataclass(slots=True)
class VHostTotals:
    """A vhost's counters that no queue holds: publishes into its exchanges, publishes on channels
    in confirm mode and those confirmed, routed nowhere (of which returned to a mandatory
    publisher), bytes of closed connections."""
    published: int = 0
    received_confirm: int = 0
    confirmed: int = 0
    unroutable: int = 0
    unroutable_returned: int = 0
    recv_oct: int = 0
    send_oct: int = 0


@dataclass(slots=True)
class Retired:
    """What deleted queues (by queue type), exchanges and vhosts had counted."""
    queues: dict[str, QueueStats] = field(default_factory=lambda: {t: QueueStats() for t in QUEUE_TYPES})
    vhosts: VHostTotals = field(default_factory=VHostTotals)

    def queue_gone(self, queue: Destination) -> None:
        add_stats(self.queues.setdefault(queue.queue_type, QueueStats()), queue.stats)

    def exchange_gone(self, exchange: Exchange) -> None:
        self.vhosts.published += exchange.published_in

    def vhost_gone(self, vhost: CountedVHost) -> None:
        """After its queues went (each through ``queue_gone``): its exchanges and own counters."""
        _add_vhost(self.vhosts, vhost)


def _add_vhost(into: VHostTotals, vhost: CountedVHost) -> None:
    into.published += sum(ex.published_in for ex in vhost.exchanges.values())
    into.received_confirm += vhost.received_confirm
    into.confirmed += vhost.confirmed
    into.unroutable += vhost.unroutable
    into.unroutable_returned += vhost.unroutable_returned
    into.recv_oct += vhost.octets_closed[0]
    into.send_oct += vhost.octets_closed[1]


def node_totals(retired: Retired, vhosts: Iterable[CountedVHost]) -> tuple[dict[str, QueueStats], VHostTotals]:
    """Queue counters summed by queue type, and the vhost counters summed, over the live objects
    and the retired ones (live connections' bytes are the caller's: they sit on the sessions)."""
    by_type = {t: QueueStats() for t in QUEUE_TYPES}
    for kind, stats in retired.queues.items():
        add_stats(by_type.setdefault(kind, QueueStats()), stats)
    r = retired.vhosts
    total = VHostTotals(r.published, r.received_confirm, r.confirmed, r.unroutable, r.unroutable_returned,
                        r.recv_oct, r.send_oct)
    for vhost in vhosts:
        for queue in vhost.queues.values():
            add_stats(by_type.setdefault(queue.queue_type, QueueStats()), queue.stats)
        _add_vhost(total, vhost)
    return by_type, total
