"""The sans-IO AMQP 0-9-1 protocol core: bytes in, events and bytes out (no trio, no broker)."""

from .connection import AMQPConnection, ConnectionState
from .errors import AMQPError, ChannelException, ConnectionException
from .properties import BasicProperties, decode_properties, encode_properties
from .spec import PROTOCOL_HEADER, FrameType, ReplyCode

__all__ = [
    "PROTOCOL_HEADER",
    "AMQPConnection",
    "AMQPError",
    "BasicProperties",
    "ChannelException",
    "ConnectionException",
    "ConnectionState",
    "FrameType",
    "ReplyCode",
    "decode_properties",
    "encode_properties",
]
