"""What ``AMQPConnection.receive_data`` hands the session: one small object per thing that
happened on the wire (frozen, but for the two made per message)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .method_codec import Method
from .methods_basic import BasicPublish

__all__ = [
    "BadProtocolHeader",
    "ChannelClosed",
    "ChannelOpenRequested",
    "ConnectionCloseOk",
    "ConnectionClosed",
    "ContentReceived",
    "Event",
    "MethodReceived",
]


# The two events every message makes are not frozen: a frozen dataclass's __init__ sets each
# field through object.__setattr__, about three times the cost, once per message or ack.
@dataclass(slots=True)
class MethodReceived:
    channel: int
    method: Method


@dataclass(slots=True)
class ContentReceived:
    """A complete basic.publish: method, the publisher's property bytes, and the body; with the
    headers table the frame check already parsed (None when the properties have none)."""

    channel: int
    method: BasicPublish
    props_raw: bytes
    body: bytes
    body_size: int
    headers: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ChannelOpenRequested:
    """channel.open passed the protocol's checks (a fresh id, under channel_max): no open-ok is
    sent yet. The session applies its own checks (the user's max-channels) and answers with
    ``AMQPConnection.accept_channel`` or closes the connection, as RabbitMQ does, without open-ok.
    Frames the peer pipelines after channel.open are accepted meanwhile and come after this event."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The peer closed the channel (close-ok already queued), or the protocol closed it on a
    channel-level fault (by_peer False). Either way its state is gone."""

    channel: int
    reply_code: int
    reply_text: str
    by_peer: bool


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer sent connection.close (close-ok queued), or we closed on a protocol fault."""

    reply_code: int
    reply_text: str
    by_peer: bool


@dataclass(frozen=True, slots=True)
class ConnectionCloseOk:
    """The peer answered our connection.close: the socket may go."""


@dataclass(frozen=True, slots=True)
class BadProtocolHeader:
    """Not AMQP 0-9-1: our header is queued as the answer; flush and close."""


Event = (MethodReceived | ContentReceived | ChannelOpenRequested | ChannelClosed | ConnectionClosed | ConnectionCloseOk
         | BadProtocolHeader)
