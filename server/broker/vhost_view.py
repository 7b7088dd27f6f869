"""A vhost as the layers under ``vhost.py`` see it: its maps, and the one call back up.

Rule: the delivery owner (``delivery.py``) and the policy helpers (``policies.py``) sit below
``VHost``, which calls them on every declare, purge and delete. They still read a vhost's exchanges,
queues and delayed messages, and the delivery owner deletes a queue whose last consumer left
(auto-delete) or whose x-expires lease ran out. They name this protocol instead of importing
``VHost``, so the import graph stays one way; ``VHost`` is its only implementation and owns every
field named here.
"""

from __future__ import annotations

from typing import Protocol

from headrace.exchanges import Exchange
from headrace.queues import Destination

from .delayed import DelayedMessages

__all__ = ["VHostView"]


class VHostView(Protocol):
    name: str
    queues: dict[str, Destination]
    exchanges: dict[str, Exchange]
    mirrored: set[str]
    delayed_exchanges: set[str]
    delayed: DelayedMessages
    unroutable: int  # publishes routed to no queue, counted by the delivery owner
    tracing: bool  # the firehose copies its publishes and deliveries (firehose.py)

    def delete_queue(self, name: str, *, owner: object | None = None, if_unused: bool = False,
                     if_empty: bool = False) -> int:
        """Delete the queue with the vhost's rules (unbind, definitions, the delivery owner's side)."""
        ...
