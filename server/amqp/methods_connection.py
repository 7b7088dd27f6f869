"""The connection and channel class methods of AMQP 0-9-1 (with RabbitMQ's extensions), one frozen
dataclass each; the annotations are the wire kinds the codec packs, in wire order."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fields import Bit, Long, LongStr, Octet, Short, ShortStr, Table
from .method_codec import Method, amqp_method

__all__ = [
    "ChannelClose",
    "ChannelCloseOk",
    "ChannelFlow",
    "ChannelFlowOk",
    "ChannelOpen",
    "ChannelOpenOk",
    "ConnectionBlocked",
    "ConnectionClose",
    "ConnectionCloseOk",
    "ConnectionOpen",
    "ConnectionOpenOk",
    "ConnectionSecure",
    "ConnectionSecureOk",
    "ConnectionStart",
    "ConnectionStartOk",
    "ConnectionTune",
    "ConnectionTuneOk",
    "ConnectionUnblocked",
    "ConnectionUpdateSecret",
    "ConnectionUpdateSecretOk",
]


@amqp_method(10, 10, "connection.start")
@dataclass(frozen=True, slots=True)
class ConnectionStart(Method):
    version_major: Octet = 0
    version_minor: Octet = 9
    server_properties: Table = field(default_factory=dict)
    mechanisms: LongStr = b"PLAIN"
    locales: LongStr = b"en_US"


@amqp_method(10, 11, "connection.start-ok")
@dataclass(frozen=True, slots=True)
class ConnectionStartOk(Method):
    client_properties: Table = field(default_factory=dict)
    mechanism: ShortStr = "PLAIN"
    response: LongStr = b""
    locale: ShortStr = "en_US"


@amqp_method(10, 20, "connection.secure")
@dataclass(frozen=True, slots=True)
class ConnectionSecure(Method):
    challenge: LongStr = b""


@amqp_method(10, 21, "connection.secure-ok")
@dataclass(frozen=True, slots=True)
class ConnectionSecureOk(Method):
    response: LongStr = b""


@amqp_method(10, 30, "connection.tune")
@dataclass(frozen=True, slots=True)
class ConnectionTune(Method):
    channel_max: Short = 0
    frame_max: Long = 0
    heartbeat: Short = 0


@amqp_method(10, 31, "connection.tune-ok")
@dataclass(frozen=True, slots=True)
class ConnectionTuneOk(Method):
    channel_max: Short = 0
    frame_max: Long = 0
    heartbeat: Short = 0


@amqp_method(10, 40, "connection.open")
@dataclass(frozen=True, slots=True)
class ConnectionOpen(Method):
    virtual_host: ShortStr = "/"
    capabilities: ShortStr = ""
    insist: Bit = False


@amqp_method(10, 41, "connection.open-ok")
@dataclass(frozen=True, slots=True)
class ConnectionOpenOk(Method):
    known_hosts: ShortStr = ""


@amqp_method(10, 50, "connection.close")
@dataclass(frozen=True, slots=True)
class ConnectionClose(Method):
    reply_code: Short = 0
    reply_text: ShortStr = ""
    class_id: Short = 0
    method_id: Short = 0


@amqp_method(10, 51, "connection.close-ok")
@dataclass(frozen=True, slots=True)
class ConnectionCloseOk(Method):
    pass


@amqp_method(10, 60, "connection.blocked")
@dataclass(frozen=True, slots=True)
class ConnectionBlocked(Method):
    reason: ShortStr = ""


@amqp_method(10, 61, "connection.unblocked")
@dataclass(frozen=True, slots=True)
class ConnectionUnblocked(Method):
    pass


@amqp_method(10, 70, "connection.update-secret")
@dataclass(frozen=True, slots=True)
class ConnectionUpdateSecret(Method):
    new_secret: LongStr = b""
    reason: ShortStr = ""


@amqp_method(10, 71, "connection.update-secret-ok")
@dataclass(frozen=True, slots=True)
class ConnectionUpdateSecretOk(Method):
    pass


@amqp_method(20, 10, "channel.open")
@dataclass(frozen=True, slots=True)
class ChannelOpen(Method):
    out_of_band: ShortStr = ""


@amqp_method(20, 11, "channel.open-ok")
@dataclass(frozen=True, slots=True)
class ChannelOpenOk(Method):
    channel_id: LongStr = b""


@amqp_method(20, 20, "channel.flow")
@dataclass(frozen=True, slots=True)
class ChannelFlow(Method):
    active: Bit = True


@amqp_method(20, 21, "channel.flow-ok")
@dataclass(frozen=True, slots=True)
class ChannelFlowOk(Method):
    active: Bit = True


@amqp_method(20, 40, "channel.close")
@dataclass(frozen=True, slots=True)
class ChannelClose(Method):
    reply_code: Short = 0
    reply_text: ShortStr = ""
    class_id: Short = 0
    method_id: Short = 0


@amqp_method(20, 41, "channel.close-ok")
@dataclass(frozen=True, slots=True)
class ChannelCloseOk(Method):
    pass
