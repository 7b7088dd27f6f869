"""The exchange and queue class methods of AMQP 0-9-1 (with RabbitMQ's extensions), one frozen
dataclass each; the annotations are the wire kinds the codec packs, in wire order."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fields import Bit, Long, Short, ShortStr, Table
from .method_codec import Method, amqp_method

__all__ = [
    "ExchangeBind",
    "ExchangeBindOk",
    "ExchangeDeclare",
    "ExchangeDeclareOk",
    "ExchangeDelete",
    "ExchangeDeleteOk",
    "ExchangeUnbind",
    "ExchangeUnbindOk",
    "QueueBind",
    "QueueBindOk",
    "QueueDeclare",
    "QueueDeclareOk",
    "QueueDelete",
    "QueueDeleteOk",
    "QueuePurge",
    "QueuePurgeOk",
    "QueueUnbind",
    "QueueUnbindOk",
]


@amqp_method(40, 10, "exchange.declare")
@dataclass(frozen=True, slots=True)
class ExchangeDeclare(Method):
    ticket: Short = 0
    exchange: ShortStr = ""
    type: ShortStr = "direct"
    passive: Bit = False
    durable: Bit = False
    auto_delete: Bit = False
    internal: Bit = False
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(40, 11, "exchange.declare-ok")
@dataclass(frozen=True, slots=True)
class ExchangeDeclareOk(Method):
    pass


@amqp_method(40, 20, "exchange.delete")
@dataclass(frozen=True, slots=True)
class ExchangeDelete(Method):
    ticket: Short = 0
    exchange: ShortStr = ""
    if_unused: Bit = False
    nowait: Bit = False


@amqp_method(40, 21, "exchange.delete-ok")
@dataclass(frozen=True, slots=True)
class ExchangeDeleteOk(Method):
    pass


@amqp_method(40, 30, "exchange.bind")
@dataclass(frozen=True, slots=True)
class ExchangeBind(Method):
    ticket: Short = 0
    destination: ShortStr = ""
    source: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(40, 31, "exchange.bind-ok")
@dataclass(frozen=True, slots=True)
class ExchangeBindOk(Method):
    pass


@amqp_method(40, 40, "exchange.unbind")
@dataclass(frozen=True, slots=True)
class ExchangeUnbind(Method):
    ticket: Short = 0
    destination: ShortStr = ""
    source: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(40, 51, "exchange.unbind-ok")
@dataclass(frozen=True, slots=True)
class ExchangeUnbindOk(Method):
    pass


@amqp_method(50, 10, "queue.declare")
@dataclass(frozen=True, slots=True)
class QueueDeclare(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    passive: Bit = False
    durable: Bit = False
    exclusive: Bit = False
    auto_delete: Bit = False
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(50, 11, "queue.declare-ok")
@dataclass(frozen=True, slots=True)
class QueueDeclareOk(Method):
    queue: ShortStr = ""
    message_count: Long = 0
    consumer_count: Long = 0


@amqp_method(50, 20, "queue.bind")
@dataclass(frozen=True, slots=True)
class QueueBind(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(50, 21, "queue.bind-ok")
@dataclass(frozen=True, slots=True)
class QueueBindOk(Method):
    pass


@amqp_method(50, 30, "queue.purge")
@dataclass(frozen=True, slots=True)
class QueuePurge(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    nowait: Bit = False


@amqp_method(50, 31, "queue.purge-ok")
@dataclass(frozen=True, slots=True)
class QueuePurgeOk(Method):
    message_count: Long = 0


@amqp_method(50, 40, "queue.delete")
@dataclass(frozen=True, slots=True)
class QueueDelete(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    if_unused: Bit = False
    if_empty: Bit = False
    nowait: Bit = False


@amqp_method(50, 41, "queue.delete-ok")
@dataclass(frozen=True, slots=True)
class QueueDeleteOk(Method):
    message_count: Long = 0


@amqp_method(50, 50, "queue.unbind")
@dataclass(frozen=True, slots=True)
class QueueUnbind(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    arguments: Table = field(default_factory=dict)


@amqp_method(50, 51, "queue.unbind-ok")
@dataclass(frozen=True, slots=True)
class QueueUnbindOk(Method):
    pass
