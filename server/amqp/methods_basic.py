"""The basic, confirm and tx class methods of AMQP 0-9-1 (with RabbitMQ's extensions), one frozen
dataclass each; the annotations are the wire kinds the codec packs, in wire order."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fields import Bit, Long, LongLong, Short, ShortStr, Table
from .method_codec import Method, amqp_method

__all__ = [
    "BasicAck",
    "BasicCancel",
    "BasicCancelOk",
    "BasicConsume",
    "BasicConsumeOk",
    "BasicDeliver",
    "BasicGet",
    "BasicGetEmpty",
    "BasicGetOk",
    "BasicNack",
    "BasicPublish",
    "BasicQos",
    "BasicQosOk",
    "BasicRecover",
    "BasicRecoverAsync",
    "BasicRecoverOk",
    "BasicReject",
    "BasicReturn",
    "ConfirmSelect",
    "ConfirmSelectOk",
    "TxCommit",
    "TxCommitOk",
    "TxRollback",
    "TxRollbackOk",
    "TxSelect",
    "TxSelectOk",
]


@amqp_method(60, 10, "basic.qos")
@dataclass(frozen=True, slots=True)
class BasicQos(Method):
    prefetch_size: Long = 0
    prefetch_count: Short = 0
    global_: Bit = False


@amqp_method(60, 11, "basic.qos-ok")
@dataclass(frozen=True, slots=True)
class BasicQosOk(Method):
    pass


@amqp_method(60, 20, "basic.consume")
@dataclass(frozen=True, slots=True)
class BasicConsume(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    consumer_tag: ShortStr = ""
    no_local: Bit = False
    no_ack: Bit = False
    exclusive: Bit = False
    nowait: Bit = False
    arguments: Table = field(default_factory=dict)


@amqp_method(60, 21, "basic.consume-ok")
@dataclass(frozen=True, slots=True)
class BasicConsumeOk(Method):
    consumer_tag: ShortStr = ""


@amqp_method(60, 30, "basic.cancel")
@dataclass(frozen=True, slots=True)
class BasicCancel(Method):
    consumer_tag: ShortStr = ""
    nowait: Bit = False


@amqp_method(60, 31, "basic.cancel-ok")
@dataclass(frozen=True, slots=True)
class BasicCancelOk(Method):
    consumer_tag: ShortStr = ""


# basic.publish and basic.ack are decoded once per message (or ack) from a client: not frozen,
# because a frozen dataclass's __init__ costs about three times as much (``events.py``).
@amqp_method(60, 40, "basic.publish", content=True)
@dataclass(slots=True)
class BasicPublish(Method):
    ticket: Short = 0
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    mandatory: Bit = False
    immediate: Bit = False


@amqp_method(60, 50, "basic.return", content=True)
@dataclass(frozen=True, slots=True)
class BasicReturn(Method):
    reply_code: Short = 0
    reply_text: ShortStr = ""
    exchange: ShortStr = ""
    routing_key: ShortStr = ""


@amqp_method(60, 60, "basic.deliver", content=True)
@dataclass(frozen=True, slots=True)
class BasicDeliver(Method):
    consumer_tag: ShortStr = ""
    delivery_tag: LongLong = 0
    redelivered: Bit = False
    exchange: ShortStr = ""
    routing_key: ShortStr = ""


@amqp_method(60, 70, "basic.get")
@dataclass(frozen=True, slots=True)
class BasicGet(Method):
    ticket: Short = 0
    queue: ShortStr = ""
    no_ack: Bit = False


@amqp_method(60, 71, "basic.get-ok", content=True)
@dataclass(frozen=True, slots=True)
class BasicGetOk(Method):
    delivery_tag: LongLong = 0
    redelivered: Bit = False
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    message_count: Long = 0


@amqp_method(60, 72, "basic.get-empty")
@dataclass(frozen=True, slots=True)
class BasicGetEmpty(Method):
    cluster_id: ShortStr = ""


@amqp_method(60, 80, "basic.ack")
@dataclass(slots=True)
class BasicAck(Method):
    delivery_tag: LongLong = 0
    multiple: Bit = False


@amqp_method(60, 90, "basic.reject")
@dataclass(frozen=True, slots=True)
class BasicReject(Method):
    delivery_tag: LongLong = 0
    requeue: Bit = True


@amqp_method(60, 100, "basic.recover-async")
@dataclass(frozen=True, slots=True)
class BasicRecoverAsync(Method):
    requeue: Bit = False


@amqp_method(60, 110, "basic.recover")
@dataclass(frozen=True, slots=True)
class BasicRecover(Method):
    requeue: Bit = False


@amqp_method(60, 111, "basic.recover-ok")
@dataclass(frozen=True, slots=True)
class BasicRecoverOk(Method):
    pass


@amqp_method(60, 120, "basic.nack")
@dataclass(frozen=True, slots=True)
class BasicNack(Method):
    delivery_tag: LongLong = 0
    multiple: Bit = False
    requeue: Bit = True


@amqp_method(85, 10, "confirm.select")
@dataclass(frozen=True, slots=True)
class ConfirmSelect(Method):
    nowait: Bit = False


@amqp_method(85, 11, "confirm.select-ok")
@dataclass(frozen=True, slots=True)
class ConfirmSelectOk(Method):
    pass


@amqp_method(90, 10, "tx.select")
@dataclass(frozen=True, slots=True)
class TxSelect(Method):
    pass


@amqp_method(90, 11, "tx.select-ok")
@dataclass(frozen=True, slots=True)
class TxSelectOk(Method):
    pass


@amqp_method(90, 20, "tx.commit")
@dataclass(frozen=True, slots=True)
class TxCommit(Method):
    pass


@amqp_method(90, 21, "tx.commit-ok")
@dataclass(frozen=True, slots=True)
class TxCommitOk(Method):
    pass


@amqp_method(90, 30, "tx.rollback")
@dataclass(frozen=True, slots=True)
class TxRollback(Method):
    pass


@amqp_method(90, 31, "tx.rollback-ok")
@dataclass(frozen=True, slots=True)
class TxRollbackOk(Method):
    pass
