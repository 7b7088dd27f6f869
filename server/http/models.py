"""The pydantic models of the HTTP API's request bodies, and the checks that go with them.

Bodies are validated here, at the edge, before anything reaches the broker: a wrong type is a 400
with pydantic's account of it. RabbitMQ's rules where they differ from pydantic's lax defaults:
flags take only true/false or "true"/"false" (``parse_bool``), message properties are typed as AMQP
carries them, and so are routing keys (``RoutingKey``: the names rule of ``amqp/names.py``). The
definitions document has its own module (``definitions_body.py``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from headrace.server.amqp.names import check_name
from headrace.server.broker.publish_checks import parse_expiration

from .routes import HTTPError

__all__ = ["BindingBody", "ExchangeBody", "Flag", "GetBody", "MirrorBody", "PermissionBody", "PropertiesBody",
           "PublishBody", "QueueBody", "RoutingKey", "SettleBody", "SuperStreamBody", "UserBody", "from_json_value",
           "parse_flag",
           "validation_reason"]


def parse_flag(value: Any) -> bool:
    """RabbitMQ's ``parse_bool``: true/false or the strings "true"/"false"; anything else ("yes", 1)
    is a 400 rather than pydantic's lax reading of it as a bool."""
    if isinstance(value, bool):
        return value
    if value == "true":
        return True
    if value == "false":
        return False
    raise ValueError(f"{value!r} is not a boolean (true or false)")


Flag = Annotated[bool, BeforeValidator(parse_flag)]


def _routing_key(value: str) -> str:
    return check_name("routing key", value)


# a routing key AMQP can carry (``names.check_name``): a longer one could not be delivered whole
RoutingKey = Annotated[str, AfterValidator(_routing_key)]


def _short_string(value: str) -> str:
    return check_name("short string", value)


# a message property AMQP carries as a short string: 255 bytes, not characters (cut at 255 bytes,
# a longer one would end inside a character, which no client can decode)
ShortStr = Annotated[str, AfterValidator(_short_string)]


class ExchangeBody(BaseModel):
    type: str = "direct"
    durable: Flag = True
    auto_delete: Flag = False
    internal: Flag = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class QueueBody(BaseModel):
    durable: Flag = True
    auto_delete: Flag = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class BindingBody(BaseModel):
    routing_key: RoutingKey = ""
    arguments: dict[str, Any] = Field(default_factory=dict)


class PropertiesBody(BaseModel):
    """Message properties of a publish, typed as AMQP carries them: a wrong type is a 400, not a
    failure while encoding. Header values ``{"$base64": "..."}`` become byte arrays."""
    model_config = ConfigDict(extra="forbid", strict=True)
    content_type: ShortStr | None = None
    content_encoding: ShortStr | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = Field(None, ge=1, le=2)
    priority: int | None = Field(None, ge=0, le=255)
    correlation_id: ShortStr | None = None
    reply_to: ShortStr | None = None
    expiration: ShortStr | None = None
    message_id: ShortStr | None = None
    timestamp: int | None = Field(None, ge=0, lt=1 << 63)
    type: ShortStr | None = None
    user_id: ShortStr | None = None
    app_id: ShortStr | None = None
    cluster_id: ShortStr | None = None

    @field_validator("expiration")
    @classmethod
    def _expiration(cls, value: str | None) -> str | None:
        """As an AMQP publish's (406 there): a whole publish-batch is refused before any of it is
        published, rather than failing half-way through."""
        if value is not None:
            try:
                parse_expiration(value)
            except ValueError:
                raise ValueError(f"invalid expiration '{value}' (milliseconds, a non-negative integer)") from None
        return value


def from_json_value(value: Any) -> Any:
    """Inverse of ``consume.json_value`` for byte arrays: ``{"$base64": "..."}`` -> bytes."""
    if isinstance(value, dict):
        if set(value) == {"$base64"} and isinstance(value["$base64"], str):
            try:
                return base64.b64decode(value["$base64"], validate=True)
            except binascii.Error:
                raise HTTPError(400, "bad_request", "a $base64 header value is not valid base64") from None
        return {k: from_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_value(v) for v in value]
    return value


def validation_reason(exc: ValidationError) -> str:
    """One line per problem, e.g. ``properties.priority: Input should be a valid integer``."""
    return "; ".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors(include_url=False))


class PublishBody(BaseModel):
    routing_key: RoutingKey = ""
    payload: str = ""
    payload_encoding: str = "string"  # or base64
    properties: dict[str, Any] = Field(default_factory=dict)


class GetBody(BaseModel):
    count: int = Field(1, ge=1, le=10_000)
    ackmode: str = "ack_requeue_true"
    encoding: str = "auto"
    truncate: int | None = Field(None, ge=0)


class UserBody(BaseModel):
    password: str | None = None
    password_hash: str | None = None
    tags: str | list[str] = ""


class PermissionBody(BaseModel):
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


class MirrorBody(BaseModel):
    max_age_ms: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1)


class SettleBody(BaseModel):
    delivery_ids: list[int]
    action: str = "ack"  # ack | nack | reject
    requeue: bool = True


class SuperStreamBody(BaseModel):
    partitions: int = 3  # rabbitmq-streams add_super_stream's default; under 1 is the broker's 406
    arguments: dict[str, Any] = Field(default_factory=dict)  # each partition stream's x-arguments
