"""The families of counters the management API shows with rates, in RabbitMQ's order.

A family is what one ``*_details`` group of an object holds: a queue's message counters
(``QUEUE_STATS``), a vhost's or a channel's (``VHOST_STATS``), the overview's churn (``CHURN``),
depths, socket octets. The sampler (``sampler.py``) records them into the rate history
(``history.py``), which gives their rates and samples; counters only go up (a drop means their
objects went: no traffic), gauges such as a queue's depth are ``signed`` and their rate may be
negative, as RabbitMQ's ``messages_details``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHURN", "DEPTH", "OCTETS", "QUEUE_DEPTH_AT", "QUEUE_STATS", "VHOST_DEPTH_AT", "VHOST_OCTETS_AT",
           "VHOST_STATS", "queue_counts", "vhost_counts_from"]

# RabbitMQ's message_stats keys of a queue, in the order ``queue_counts`` gives them
QUEUE_STATS = ("publish", "deliver_get", "ack", "redeliver", "get", "get_no_ack", "deliver", "deliver_no_ack",
               "get_empty")
# and of a vhost (and the overview): the queues' plus what only channels and exchanges see
VHOST_STATS = ("publish", "confirm", "return_unroutable", "drop_unroutable", "get", "get_no_ack", "deliver",
               "deliver_no_ack", "redeliver", "ack", "deliver_get", "get_empty")
DEPTH = ("messages", "messages_ready", "messages_unacknowledged")
OCTETS = ("recv_oct", "send_oct")
# where each family starts in its object's series (``history.py``): a queue's depths after its
# counters, a vhost's (and the overview's) depths after its counters, then its octets
QUEUE_DEPTH_AT = len(QUEUE_STATS)
VHOST_DEPTH_AT = len(VHOST_STATS)
VHOST_OCTETS_AT = VHOST_DEPTH_AT + len(DEPTH)
CHURN = ("connection_created", "connection_closed", "channel_created", "channel_closed", "queue_declared",
         "queue_created", "queue_deleted")


def queue_counts(s: Any) -> tuple[int, ...]:
    """A queue's ``QueueStats`` as the ``QUEUE_STATS`` counts: ``delivered`` is every delivery and
    get; what is neither a get nor a no-ack delivery went to a consumer that acks."""
    deliver = s.delivered - s.got - s.got_no_ack - s.delivered_no_ack
    return (s.published, s.delivered, s.acked, s.redelivered, s.got, s.got_no_ack, deliver, s.delivered_no_ack,
            s.get_empty)


def vhost_counts_from(v: Any, queue_sums: list[int]) -> tuple[int, ...]:
    """The vhost's ``VHOST_STATS`` counts from the sums of its queues' ``QUEUE_STATS``, publishes
    into its exchanges, and what the channels and the delivery owner count per vhost."""
    q = dict(zip(QUEUE_STATS, queue_sums, strict=True))
    published = sum(ex.published_in for ex in v.exchanges.values())
    return (published, v.confirmed, v.unroutable_returned, v.unroutable - v.unroutable_returned,
            q["get"], q["get_no_ack"], q["deliver"], q["deliver_no_ack"], q["redeliver"], q["ack"], q["deliver_get"],
            q["get_empty"])
