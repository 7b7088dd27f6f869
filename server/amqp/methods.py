"""Every AMQP 0-9-1 method (with RabbitMQ's extensions) as a frozen dataclass, and the generic
table-driven codec for their arguments.

``FIELDS`` lists each method's arguments in wire order with their domain type; ``encode_method`` and
``decode_method`` walk it, packing consecutive ``bit`` arguments into octets as the spec requires.
The publish/deliver/ack hot path does not come through here: ``codec.py`` has hand-written
struct-based encoders and decoders for those.
"""

# This file's classes follow the spec's method list one to one.
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .errors import ConnectionException
from .spec import ReplyCode
from .tables import FrameSyntaxError, decode_table, encode_table


@dataclass(frozen=True, slots=True)
class ConnectionStart:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "connection.start"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('version_major', 'octet'), ('version_minor', 'octet'), ('server_properties', 'table'), ('mechanisms', 'longstr'), ('locales', 'longstr'), )
    version_major: int = 0
    version_minor: int = 9
    server_properties: dict[str, Any] = field(default_factory=dict)
    mechanisms: bytes = b"PLAIN"
    locales: bytes = b"en_US"


@dataclass(frozen=True, slots=True)
class ConnectionStartOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "connection.start-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('client_properties', 'table'), ('mechanism', 'shortstr'), ('response', 'longstr'), ('locale', 'shortstr'), )
    client_properties: dict[str, Any] = field(default_factory=dict)
    mechanism: str = "PLAIN"
    response: bytes = b""
    locale: str = "en_US"


@dataclass(frozen=True, slots=True)
class ConnectionSecure:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "connection.secure"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('challenge', 'longstr'), )
    challenge: bytes = b""


@dataclass(frozen=True, slots=True)
class ConnectionSecureOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "connection.secure-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('response', 'longstr'), )
    response: bytes = b""


@dataclass(frozen=True, slots=True)
class ConnectionTune:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 30
    NAME: ClassVar[str] = "connection.tune"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('channel_max', 'short'), ('frame_max', 'long'), ('heartbeat', 'short'), )
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionTuneOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 31
    NAME: ClassVar[str] = "connection.tune-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('channel_max', 'short'), ('frame_max', 'long'), ('heartbeat', 'short'), )
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionOpen:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "connection.open"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('virtual_host', 'shortstr'), ('capabilities', 'shortstr'), ('insist', 'bit'), )
    virtual_host: str = "/"
    capabilities: str = ""
    insist: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionOpenOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 41
    NAME: ClassVar[str] = "connection.open-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('known_hosts', 'shortstr'), )
    known_hosts: str = ""


@dataclass(frozen=True, slots=True)
class ConnectionClose:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 50
    NAME: ClassVar[str] = "connection.close"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('reply_code', 'short'), ('reply_text', 'shortstr'), ('class_id', 'short'), ('method_id', 'short'), )
    reply_code: int = 0
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionCloseOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 51
    NAME: ClassVar[str] = "connection.close-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ConnectionBlocked:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 60
    NAME: ClassVar[str] = "connection.blocked"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('reason', 'shortstr'), )
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ConnectionUnblocked:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 61
    NAME: ClassVar[str] = "connection.unblocked"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ConnectionUpdateSecret:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 70
    NAME: ClassVar[str] = "connection.update-secret"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('new_secret', 'longstr'), ('reason', 'shortstr'), )
    new_secret: bytes = b""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ConnectionUpdateSecretOk:
    CLASS_ID: ClassVar[int] = 10
    METHOD_ID: ClassVar[int] = 71
    NAME: ClassVar[str] = "connection.update-secret-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ChannelOpen:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "channel.open"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('out_of_band', 'shortstr'), )
    out_of_band: str = ""


@dataclass(frozen=True, slots=True)
class ChannelOpenOk:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "channel.open-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('channel_id', 'longstr'), )
    channel_id: bytes = b""


@dataclass(frozen=True, slots=True)
class ChannelFlow:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "channel.flow"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('active', 'bit'), )
    active: bool = True


@dataclass(frozen=True, slots=True)
class ChannelFlowOk:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "channel.flow-ok"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('active', 'bit'), )
    active: bool = True


@dataclass(frozen=True, slots=True)
class ChannelClose:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "channel.close"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('reply_code', 'short'), ('reply_text', 'shortstr'), ('class_id', 'short'), ('method_id', 'short'), )
    reply_code: int = 0
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class ChannelCloseOk:
    CLASS_ID: ClassVar[int] = 20
    METHOD_ID: ClassVar[int] = 41
    NAME: ClassVar[str] = "channel.close-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ExchangeDeclare:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "exchange.declare"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('exchange', 'shortstr'), ('type', 'shortstr'), ('passive', 'bit'), ('durable', 'bit'), ('auto_delete', 'bit'), ('internal', 'bit'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    exchange: str = ""
    type: str = "direct"
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExchangeDeclareOk:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "exchange.declare-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ExchangeDelete:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "exchange.delete"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('exchange', 'shortstr'), ('if_unused', 'bit'), ('nowait', 'bit'), )
    ticket: int = 0
    exchange: str = ""
    if_unused: bool = False
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class ExchangeDeleteOk:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "exchange.delete-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ExchangeBind:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 30
    NAME: ClassVar[str] = "exchange.bind"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('destination', 'shortstr'), ('source', 'shortstr'), ('routing_key', 'shortstr'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExchangeBindOk:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 31
    NAME: ClassVar[str] = "exchange.bind-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class ExchangeUnbind:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "exchange.unbind"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('destination', 'shortstr'), ('source', 'shortstr'), ('routing_key', 'shortstr'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExchangeUnbindOk:
    CLASS_ID: ClassVar[int] = 40
    METHOD_ID: ClassVar[int] = 51
    NAME: ClassVar[str] = "exchange.unbind-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class QueueDeclare:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "queue.declare"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('passive', 'bit'), ('durable', 'bit'), ('exclusive', 'bit'), ('auto_delete', 'bit'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueDeclareOk:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "queue.declare-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('queue', 'shortstr'), ('message_count', 'long'), ('consumer_count', 'long'), )
    queue: str = ""
    message_count: int = 0
    consumer_count: int = 0


@dataclass(frozen=True, slots=True)
class QueueBind:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "queue.bind"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueBindOk:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "queue.bind-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class QueuePurge:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 30
    NAME: ClassVar[str] = "queue.purge"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('nowait', 'bit'), )
    ticket: int = 0
    queue: str = ""
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class QueuePurgeOk:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 31
    NAME: ClassVar[str] = "queue.purge-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('message_count', 'long'), )
    message_count: int = 0


@dataclass(frozen=True, slots=True)
class QueueDelete:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "queue.delete"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('if_unused', 'bit'), ('if_empty', 'bit'), ('nowait', 'bit'), )
    ticket: int = 0
    queue: str = ""
    if_unused: bool = False
    if_empty: bool = False
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class QueueDeleteOk:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 41
    NAME: ClassVar[str] = "queue.delete-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('message_count', 'long'), )
    message_count: int = 0


@dataclass(frozen=True, slots=True)
class QueueUnbind:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 50
    NAME: ClassVar[str] = "queue.unbind"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), ('arguments', 'table'), )
    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueUnbindOk:
    CLASS_ID: ClassVar[int] = 50
    METHOD_ID: ClassVar[int] = 51
    NAME: ClassVar[str] = "queue.unbind-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class BasicQos:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "basic.qos"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('prefetch_size', 'long'), ('prefetch_count', 'short'), ('global_', 'bit'), )
    prefetch_size: int = 0
    prefetch_count: int = 0
    global_: bool = False


@dataclass(frozen=True, slots=True)
class BasicQosOk:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "basic.qos-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class BasicConsume:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "basic.consume"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('consumer_tag', 'shortstr'), ('no_local', 'bit'), ('no_ack', 'bit'), ('exclusive', 'bit'), ('nowait', 'bit'), ('arguments', 'table'), )
    ticket: int = 0
    queue: str = ""
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    nowait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BasicConsumeOk:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "basic.consume-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('consumer_tag', 'shortstr'), )
    consumer_tag: str = ""


@dataclass(frozen=True, slots=True)
class BasicCancel:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 30
    NAME: ClassVar[str] = "basic.cancel"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('consumer_tag', 'shortstr'), ('nowait', 'bit'), )
    consumer_tag: str = ""
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class BasicCancelOk:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 31
    NAME: ClassVar[str] = "basic.cancel-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('consumer_tag', 'shortstr'), )
    consumer_tag: str = ""


@dataclass(frozen=True, slots=True)
class BasicPublish:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "basic.publish"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = True
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), ('mandatory', 'bit'), ('immediate', 'bit'), )
    ticket: int = 0
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False


@dataclass(frozen=True, slots=True)
class BasicReturn:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 50
    NAME: ClassVar[str] = "basic.return"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = True
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('reply_code', 'short'), ('reply_text', 'shortstr'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), )
    reply_code: int = 0
    reply_text: str = ""
    exchange: str = ""
    routing_key: str = ""


@dataclass(frozen=True, slots=True)
class BasicDeliver:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 60
    NAME: ClassVar[str] = "basic.deliver"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = True
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('consumer_tag', 'shortstr'), ('delivery_tag', 'longlong'), ('redelivered', 'bit'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), )
    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""


@dataclass(frozen=True, slots=True)
class BasicGet:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 70
    NAME: ClassVar[str] = "basic.get"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('ticket', 'short'), ('queue', 'shortstr'), ('no_ack', 'bit'), )
    ticket: int = 0
    queue: str = ""
    no_ack: bool = False


@dataclass(frozen=True, slots=True)
class BasicGetOk:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 71
    NAME: ClassVar[str] = "basic.get-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = True
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('delivery_tag', 'longlong'), ('redelivered', 'bit'), ('exchange', 'shortstr'), ('routing_key', 'shortstr'), ('message_count', 'long'), )
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    message_count: int = 0


@dataclass(frozen=True, slots=True)
class BasicGetEmpty:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 72
    NAME: ClassVar[str] = "basic.get-empty"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('cluster_id', 'shortstr'), )
    cluster_id: str = ""


@dataclass(frozen=True, slots=True)
class BasicAck:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 80
    NAME: ClassVar[str] = "basic.ack"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('delivery_tag', 'longlong'), ('multiple', 'bit'), )
    delivery_tag: int = 0
    multiple: bool = False


@dataclass(frozen=True, slots=True)
class BasicReject:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 90
    NAME: ClassVar[str] = "basic.reject"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('delivery_tag', 'longlong'), ('requeue', 'bit'), )
    delivery_tag: int = 0
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class BasicRecoverAsync:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 100
    NAME: ClassVar[str] = "basic.recover-async"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('requeue', 'bit'), )
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class BasicRecover:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 110
    NAME: ClassVar[str] = "basic.recover"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('requeue', 'bit'), )
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class BasicRecoverOk:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 111
    NAME: ClassVar[str] = "basic.recover-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class BasicNack:
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 120
    NAME: ClassVar[str] = "basic.nack"
    SYNCHRONOUS: ClassVar[bool] = False
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('delivery_tag', 'longlong'), ('multiple', 'bit'), ('requeue', 'bit'), )
    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class ConfirmSelect:
    CLASS_ID: ClassVar[int] = 85
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "confirm.select"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (('nowait', 'bit'), )
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class ConfirmSelectOk:
    CLASS_ID: ClassVar[int] = 85
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "confirm.select-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxSelect:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "tx.select"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxSelectOk:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "tx.select-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxCommit:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 20
    NAME: ClassVar[str] = "tx.commit"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxCommitOk:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 21
    NAME: ClassVar[str] = "tx.commit-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxRollback:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 30
    NAME: ClassVar[str] = "tx.rollback"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


@dataclass(frozen=True, slots=True)
class TxRollbackOk:
    CLASS_ID: ClassVar[int] = 90
    METHOD_ID: ClassVar[int] = 31
    NAME: ClassVar[str] = "tx.rollback-ok"
    SYNCHRONOUS: ClassVar[bool] = True
    HAS_CONTENT: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


METHODS: dict[tuple[int, int], type] = {
    (cls.CLASS_ID, cls.METHOD_ID): cls for cls in (
        ConnectionStart,
        ConnectionStartOk,
        ConnectionSecure,
        ConnectionSecureOk,
        ConnectionTune,
        ConnectionTuneOk,
        ConnectionOpen,
        ConnectionOpenOk,
        ConnectionClose,
        ConnectionCloseOk,
        ConnectionBlocked,
        ConnectionUnblocked,
        ConnectionUpdateSecret,
        ConnectionUpdateSecretOk,
        ChannelOpen,
        ChannelOpenOk,
        ChannelFlow,
        ChannelFlowOk,
        ChannelClose,
        ChannelCloseOk,
        ExchangeDeclare,
        ExchangeDeclareOk,
        ExchangeDelete,
        ExchangeDeleteOk,
        ExchangeBind,
        ExchangeBindOk,
        ExchangeUnbind,
        ExchangeUnbindOk,
        QueueDeclare,
        QueueDeclareOk,
        QueueBind,
        QueueBindOk,
        QueuePurge,
        QueuePurgeOk,
        QueueDelete,
        QueueDeleteOk,
        QueueUnbind,
        QueueUnbindOk,
        BasicQos,
        BasicQosOk,
        BasicConsume,
        BasicConsumeOk,
        BasicCancel,
        BasicCancelOk,
        BasicPublish,
        BasicReturn,
        BasicDeliver,
        BasicGet,
        BasicGetOk,
        BasicGetEmpty,
        BasicAck,
        BasicReject,
        BasicRecoverAsync,
        BasicRecover,
        BasicRecoverOk,
        BasicNack,
        ConfirmSelect,
        ConfirmSelectOk,
        TxSelect,
        TxSelectOk,
        TxCommit,
        TxCommitOk,
        TxRollback,
        TxRollbackOk,
    )
}

_CM = struct.Struct(">HH")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")


def encode_method(method: Any) -> bytes:
    """Method frame payload: class id, method id, arguments."""
    parts = [_CM.pack(method.CLASS_ID, method.METHOD_ID)]
    bits = 0
    nbits = 0
    for name, kind in method.FIELDS:
        value = getattr(method, name)
        if kind == "bit":
            if value:
                bits |= 1 << nbits
            nbits += 1
            if nbits == 8:
                parts.append(bytes((bits,)))
                bits = nbits = 0
            continue
        if nbits:
            parts.append(bytes((bits,)))
            bits = nbits = 0
        if kind == "shortstr":
            raw = value.encode() if isinstance(value, str) else bytes(value)
            if len(raw) > 255:
                raw = raw[:255]
            parts.append(bytes((len(raw),)) + raw)
        elif kind == "longstr":
            raw = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(_I.pack(len(raw)) + raw)
        elif kind == "short":
            parts.append(_H.pack(value))
        elif kind == "long":
            parts.append(_I.pack(value))
        elif kind == "longlong" or kind == "timestamp":
            parts.append(_Q.pack(value))
        elif kind == "octet":
            parts.append(bytes((value,)))
        elif kind == "table":
            parts.append(encode_table(value))
    if nbits:
        parts.append(bytes((bits,)))
    return b"".join(parts)


def decode_method(payload: bytes | memoryview) -> Any:
    """Parse a method frame payload; bad input raises ``ConnectionException`` (the spec makes
    malformed methods a connection error)."""
    if len(payload) < 4:
        raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - method frame too short")
    class_id, method_id = _CM.unpack_from(payload, 0)
    cls = METHODS.get((class_id, method_id))
    if cls is None:
        raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                  f"COMMAND_INVALID - unknown method {class_id}.{method_id}", class_id, method_id)
    buf = payload
    offset = 4
    kwargs: dict[str, Any] = {}
    bit_index = 8
    bits = 0
    try:
        for name, kind in cls.FIELDS:
            if kind == "bit":
                if bit_index == 8:
                    bits = buf[offset]
                    offset += 1
                    bit_index = 0
                kwargs[name] = bool(bits & (1 << bit_index))
                bit_index += 1
                continue
            bit_index = 8
            if kind == "shortstr":
                n = buf[offset]
                end = offset + 1 + n
                if end > len(buf):
                    raise FrameSyntaxError("short string past the end of the frame")
                kwargs[name] = bytes(buf[offset + 1:end]).decode()
                offset = end
            elif kind == "longstr":
                (n,) = _I.unpack_from(buf, offset)
                end = offset + 4 + n
                if end > len(buf):
                    raise FrameSyntaxError("long string past the end of the frame")
                kwargs[name] = bytes(buf[offset + 4:end])
                offset = end
            elif kind == "short":
                kwargs[name] = _H.unpack_from(buf, offset)[0]
                offset += 2
            elif kind == "long":
                kwargs[name] = _I.unpack_from(buf, offset)[0]
                offset += 4
            elif kind == "longlong" or kind == "timestamp":
                kwargs[name] = _Q.unpack_from(buf, offset)[0]
                offset += 8
            elif kind == "octet":
                kwargs[name] = buf[offset]
                offset += 1
            elif kind == "table":
                kwargs[name], offset = decode_table(buf, offset)
    except (struct.error, IndexError, FrameSyntaxError, UnicodeDecodeError) as exc:
        raise ConnectionException(ReplyCode.SYNTAX_ERROR, f"SYNTAX_ERROR - malformed {cls.NAME}: {exc}",
                                  class_id, method_id) from None
    return cls(**kwargs)
