"""The definitions document of ``POST /api/definitions``, checked before anything is applied.

RabbitMQ's export format; keys headrace does not use are
ignored so a RabbitMQ export loads as is. A wrong type anywhere is a 400 with pydantic's account.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DefinitionsBody"]


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")


class VHostDef(_Item):
    name: str = Field(min_length=1)


class UserDef(_Item):
    name: str = Field(min_length=1)
    password: str | None = None
    password_hash: str | None = None
    hashing_algorithm: str = "pbkdf2_sha256"
    tags: str | list[str] = []
    limits: dict[str, int] = {}


class PermissionDef(_Item):
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


class TopicPermissionDef(_Item):
    user: str
    vhost: str
    exchange: str
    write: str = ".*"
    read: str = ".*"


class ParameterDef(_Item):
    vhost: str
    component: str = Field(min_length=1)
    name: str = Field(min_length=1)
    value: Any


class GlobalParameterDef(_Item):
    name: str = Field(min_length=1)
    value: Any


class ExchangeDef(_Item):
    name: str
    vhost: str = "/"
    type: str = "direct"
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = {}


class QueueDef(_Item):
    name: str
    vhost: str = "/"
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = {}


class BindingDef(_Item):
    source: str
    vhost: str = "/"
    destination: str
    destination_type: Literal["queue", "exchange"] = "queue"
    routing_key: str = ""
    arguments: dict[str, Any] = {}


class MirrorDef(_Item):
    exchange: str
    vhost: str = "/"
    max_age_ms: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1)


class MirrorDisabledDef(_Item):
    """An x-mirror exchange whose mirroring was switched off: without it an import would mirror
    the exchange again from its declare argument."""
    exchange: str
    vhost: str = "/"


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
    # checked by the policy store itself, which gives RabbitMQ's validation texts
    policies: list[dict[str, Any]] = []
    operator_policies: list[dict[str, Any]] = []

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
