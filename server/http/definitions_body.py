"""The definitions document of ``POST /api/definitions``, checked before anything is applied.

RabbitMQ's export format; keys headrace does not use are
ignored so a RabbitMQ export loads as is. A wrong type anywhere is a 400 with pydantic's account.
Every name and routing key must be one AMQP can carry (``Name``: the rule of ``amqp/names.py``),
which a name an AMQP client gave always is: ``.`` and ``..`` pass, as RabbitMQ's exports hold them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from headrace.server.amqp.names import check_name

from .models import RoutingKey

__all__ = ["DefinitionsBody"]


def _name(value: str) -> str:
    return check_name("name", value)


Name = Annotated[str, AfterValidator(_name)]


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")


class VHostDef(_Item):
    name: Name = Field(min_length=1)


class UserDef(_Item):
    name: Name = Field(min_length=1)
    password: str | None = None
    password_hash: str | None = None
    hashing_algorithm: str = "pbkdf2_sha256"
    tags: str | list[str] = []
    limits: dict[str, int] = {}


class PermissionDef(_Item):
    user: Name
    vhost: Name
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


class TopicPermissionDef(_Item):
    user: Name
    vhost: Name
    exchange: Name
    write: str = ".*"
    read: str = ".*"


class ParameterDef(_Item):
    vhost: Name
    component: str = Field(min_length=1)
    name: str = Field(min_length=1)
    value: Any


class GlobalParameterDef(_Item):
    name: str = Field(min_length=1)
    value: Any


class ExchangeDef(_Item):
    name: Name
    vhost: Name = "/"
    type: str = "direct"
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = {}


class QueueDef(_Item):
    name: Name
    vhost: Name = "/"
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = {}


class BindingDef(_Item):
    source: Name
    vhost: Name = "/"
    destination: Name
    destination_type: Literal["queue", "exchange"] = "queue"
    routing_key: RoutingKey = ""
    arguments: dict[str, Any] = {}


class MirrorDef(_Item):
    exchange: Name
    vhost: Name = "/"
    max_age_ms: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1)


class MirrorDisabledDef(_Item):
    """An x-mirror exchange whose mirroring was switched off: without it an import would mirror
    the exchange again from its declare argument."""
    exchange: Name
    vhost: Name = "/"


class DefinitionsBody(_Item):
    vhosts: list[VHostDef] = []
    users: list[UserDef] = []
    permissions: list[PermissionDef] = []
    topic_permissions: list[TopicPermissionDef] = []
    parameters: list[ParameterDef] = []
    global_parameters: list[GlobalParameterDef] = []
    exchanges: list[ExchangeDef] = []
    queues: list[QueueDef] = []
    bindings: list[BindingDef] = []
    mirrors: list[MirrorDef] = []
    mirrors_disabled: list[MirrorDisabledDef] = []
    # checked by the policy store itself, which gives RabbitMQ's validation texts; but the import
    # creates a policy's vhost, whose name is checked here
    policies: list[dict[str, Any]] = []
    operator_policies: list[dict[str, Any]] = []

    @field_validator("policies", "operator_policies")
    @classmethod
    def _policy_vhosts(cls, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for item in items:
            if isinstance(item.get("vhost"), str):
                _name(item["vhost"])
        return items

    def document(self) -> dict[str, Any]:
        """The checked document, with absent passwords left out (``import_definitions`` tells a
        password from a hash by which key is present)."""
        doc = self.model_dump()
        for user in doc["users"]:
            if user["password"] is None:
                del user["password"]
            if user["password_hash"] is None:
                del user["password_hash"]
        return doc
