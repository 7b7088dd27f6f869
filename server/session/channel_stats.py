"""A channel's message counters, as RabbitMQ's channel ``message_stats`` (rendered by the HTTP API).

Owned by its ``ChannelSession``, which counts where it already handles the message or frame: a
publish, a get, an ack frame (all its tags at once), a confirm flush (the batch at once). Deliveries
and gets together are the delivery tags the channel handed out, so they cost nothing extra.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChannelStats"]


@dataclass(slots=True)
class ChannelStats:
    published: int = 0
    confirmed: int = 0
    returned: int = 0  # unroutable, mandatory: returned to the publisher
    dropped: int = 0  # unroutable, not mandatory
    got: int = 0
    got_no_ack: int = 0
    get_empty: int = 0
    delivered_no_ack: int = 0
    redelivered: int = 0
    acked: int = 0

    def counts(self, tags_issued: int) -> tuple[int, ...]:
        """In the order of the HTTP API's ``VHOST_STATS``: publish, confirm, return_unroutable,
        drop_unroutable, get, get_no_ack, deliver, deliver_no_ack, redeliver, ack, deliver_get,
        get_empty. ``tags_issued`` counts every delivery and get with a tag."""
        deliver = tags_issued - self.got - self.got_no_ack - self.delivered_no_ack
        return (self.published, self.confirmed, self.returned, self.dropped, self.got, self.got_no_ack, deliver,
                self.delivered_no_ack, self.redelivered, self.acked, tags_issued, self.get_empty)
