"""Which RabbitMQ release's semantics the broker follows where 4.x changed 3.10's.

Owner: the ``Broker`` holds one ``Compat``, made from the ``rabbitmq_compat`` setting at start and
never changed; the parts that differ read its flags once, when they are made (a queue at declare,
a channel at open), so a broker on 3.10 semantics pays nothing per message for the others.
docs/compat.md lists each behaviour and the release it follows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from headrace.queues import QueueArgs

__all__ = ["COMPAT_3_10", "Compat", "QUORUM_DELIVERY_LIMIT", "QUORUM_PRIORITIES"]

QUORUM_DELIVERY_LIMIT = 20  # RabbitMQ 4.0's default delivery-limit of a quorum queue
QUORUM_PRIORITIES = 32  # RabbitMQ 4.3's strict priorities on a quorum queue (0..31)


def _at_least(version: str, floor: tuple[int, int]) -> bool:
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= floor


@dataclass(frozen=True, slots=True)
class Compat:
    version: str = "3.10"
    # 3.10 accepts classic mirroring's policy keys (ha-*); 4.0 removed them
    classic_mirroring: bool = True
    # 4.0: a quorum queue without a delivery-limit gets 20 (``-1`` asks for none)
    quorum_delivery_limit: int | None = None
    # 4.3: a nack (and a consumer timeout) returns a message without counting a failure; a reject
    # and a lost channel count one; the limit compares the failures, ``x-acquired-count`` all returns
    split_counts: bool = False
    # 4.3: a quorum queue keeps 32 strict priorities without ``x-max-priority``
    quorum_priorities: int | None = None
    # 4.3: a consumer timeout cancels the consumer (basic.cancel) instead of closing the channel,
    # and can be set per consumer, per queue and by policy; delayed retry on quorum queues
    timeout_cancels: bool = False
    delayed_retry: bool = False

    @classmethod
    def of(cls, version: str) -> Compat:
        four = _at_least(version, (4, 0))
        four_three = _at_least(version, (4, 3))
        return cls(version=version,
                   classic_mirroring=not four,
                   quorum_delivery_limit=QUORUM_DELIVERY_LIMIT if four else None,
                   split_counts=four_three,
                   quorum_priorities=QUORUM_PRIORITIES if four_three else None,
                   timeout_cancels=four_three,
                   delayed_retry=four_three)

    def queue_defaults(self, args: QueueArgs, kind: str) -> QueueArgs:
        """A quorum queue's arguments with this release's defaults filled in where it set none."""
        if kind != "quorum":  # the declared x-queue-type
            return args
        changes: dict[str, Any] = {}
        if self.quorum_delivery_limit is not None and args.delivery_limit is None and not args.no_delivery_limit:
            changes["delivery_limit"] = self.quorum_delivery_limit
        if self.quorum_priorities is not None and args.max_priority is None:
            changes["max_priority"] = self.quorum_priorities - 1
        if args.delayed_retry != "disabled" and not self.delayed_retry:
            changes["delayed_retry"] = "disabled"  # before 4.3 the arguments mean nothing
        return replace(args, **changes) if changes else args


COMPAT_3_10 = Compat()
