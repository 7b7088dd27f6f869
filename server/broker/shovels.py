"""Dynamic shovels: their definition (RabbitMQ's ``shovel`` runtime parameter) and the bookkeeping of
one running link, sans-IO.

Owner: a definition is a runtime parameter (``RuntimeParameters``, component ``shovel``); this
module only reads one (``parse_shovel``) into a ``ShovelSpec``. The shell's shovel task
(``server/net/shovel_link.py``) owns one ``Ledger`` per connection pair it runs: which source
deliveries wait for the destination's confirm, and how many messages are left before the shovel
deletes itself.

The keys are those of RabbitMQ's AMQP 0-9-1 dynamic shovel (3.10, with the older un-prefixed
``prefetch-count``, ``delete-after``, ``add-forward-headers`` and ``publish-properties``
accepted as RabbitMQ still does); every one accepted is applied (``rewrite_properties`` for the
destination's properties and headers, ``consumer_args`` on the source's basic.consume).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties

from .node import NODE_NAME

__all__ = ["ACK_MODES", "Endpoint", "FederationHop", "Ledger", "ShovelSpec", "parse_shovel", "parse_uri", "redact",
           "rewrite_properties"]

ACK_MODES = ("on-confirm", "on-publish", "no-ack")
_KNOWN = {
    "src-uri", "src-queue", "src-exchange", "src-exchange-key", "src-prefetch-count", "src-delete-after",
    "src-consumer-args", "src-queue-args", "src-protocol", "dest-uri", "dest-queue", "dest-exchange",
    "dest-exchange-key", "dest-queue-args", "dest-protocol", "dest-add-forward-headers",
    "dest-add-timestamp-header", "dest-publish-properties", "ack-mode", "reconnect-delay", "prefetch-count",
    "delete-after", "add-forward-headers", "publish-properties",
}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one side connects; ``host`` None: this broker (``amqp://`` with no host)."""
    host: str | None
    port: int
    user: str | None
    password: str | None
    vhost: str
    tls: bool


@dataclass(frozen=True, slots=True)
class FederationHop:
    """What makes a link a federation link (``federation.py``): the durable queue on the upstream
    and the keys (with arguments) it is bound with, and the hop count's rule."""
    queue: str
    bindings: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    max_hops: int
    upstream: str  # the upstream parameter's name
    upstream_exchange: str
    exchange_type: str


@dataclass(frozen=True, slots=True)
class ShovelSpec:
    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = "#"
    src_queue_args: dict[str, Any] = field(default_factory=dict)
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue_args: dict[str, Any] = field(default_factory=dict)
    ack_mode: str = "on-confirm"
    prefetch_count: int = 1000
    delete_after: int | str = "never"  # "never", "queue-length" or a count
    reconnect_delay: float = 5.0
    federation: FederationHop | None = None
    consumer_args: dict[str, Any] = field(default_factory=dict)  # src-consumer-args: basic.consume's arguments
    # dest-publish-properties: (property, value) pairs set on every message forwarded
    publish_properties: tuple[tuple[str, Any], ...] = ()
    forward_headers: bool = False  # dest-add-forward-headers: x-shovelled
    timestamp_header: bool = False  # dest-add-timestamp-header: x-shovelled-timestamp
    name: str = ""  # the shovel's name and vhost, for x-shovelled
    vhost: str = "/"
    # a federated queue's link: consume from the source only while the destination queue wants
    # messages (consumers with credit left, none ready), as RabbitMQ's queue federation
    on_demand: bool = False

    @property
    def rewrites(self) -> bool:
        """Whether a forwarded message's properties change (else its bytes go as they came)."""
        return bool(self.publish_properties) or self.forward_headers or self.timestamp_header


def redact(uri: str) -> str:
    """The URI with its password taken out, as RabbitMQ shows it in the shovel status."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def parse_uri(uri: str, own_vhost: str) -> Endpoint:
    """An ``amqp://`` or ``amqps://`` URI. With no host, this broker and the shovel's own vhost."""
    parts = urlsplit(uri)
    if parts.scheme not in ("amqp", "amqps"):
        raise ValueError(f"URI '{redact(uri)}': the scheme must be amqp or amqps")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"URI '{redact(uri)}': bad port") from None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if not parts.hostname:
        return Endpoint(None, 0, user, password, unquote(parts.path[1:]) if len(parts.path) > 1 else own_vhost, False)
    tls = parts.scheme == "amqps"
    vhost = unquote(parts.path[1:]) if parts.path else "/"
    return Endpoint(parts.hostname, port or (5671 if tls else 5672), user if user is not None else "guest",
                    password if password is not None else "guest", vhost, tls)


def _uris(value: dict[str, Any], key: str) -> tuple[str, ...]:
    uri = value.get(key)
    uris = [uri] if isinstance(uri, str) else uri
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise ValueError(f"'{key}' is required: an AMQP URI or a list of them")
    for u in uris:
        parse_uri(u, "/")
    return tuple(uris)


def _str(value: dict[str, Any], key: str) -> str | None:
    v = value.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"'{key}' must be a string")
    return v


def _count(value: dict[str, Any], key: str, default: int) -> int:
    v = value.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"'{key}' must be a non-negative integer")
    return v


def _table(value: dict[str, Any], key: str) -> dict[str, Any]:
    v = value.get(key, {})
    if not isinstance(v, dict):
        raise ValueError(f"'{key}' must be an object")
    return v


# dest-publish-properties: each property's check (RabbitMQ's names: basic.properties' fields)
_SHORTSTR = (lambda v: isinstance(v, str) and len(v.encode()) <= 255, "a string of at most 255 bytes")
_OCTET = (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255, "an integer from 0 to 255")
_PROPERTY_CHECKS: dict[str, tuple[Any, str]] = {
    **{f.name: _SHORTSTR for f in dataclasses.fields(BasicProperties)},
    "headers": (lambda v: isinstance(v, dict), "an object"),
    "delivery_mode": (lambda v: v in (1, 2) and not isinstance(v, bool), "1 or 2"),
    "priority": _OCTET,
    "timestamp": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63,
                  "a non-negative integer (seconds)"),
}


def _publish_properties(value: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    props = _table(value, "dest-publish-properties") or _table(value, "publish-properties")
    for key, v in props.items():
        check = _PROPERTY_CHECKS.get(key)
        if check is None:
            raise ValueError(f"'dest-publish-properties': unknown property '{key}' (one of "
                             f"{', '.join(f.name for f in dataclasses.fields(BasicProperties))})")
        if not check[0](v):
            raise ValueError(f"'dest-publish-properties': '{key}' must be {check[1]}")
    return tuple(sorted(props.items()))


def _flag(value: dict[str, Any], *keys: str) -> bool:
    for key in keys:
        v = value.get(key, False)
        if not isinstance(v, bool):
            raise ValueError(f"'{key}' must be true or false")
        if v:
            return True
    return False


def parse_shovel(value: Any, name: str = "", vhost: str = "/") -> ShovelSpec:
    """The parameter's value, checked as RabbitMQ checks it: ValueError says what is wrong.
    ``name`` and ``vhost`` (the parameter's) go into ``x-shovelled`` when forward headers are on."""
    if not isinstance(value, dict):
        raise ValueError("a shovel's value must be an object of shovel keys")
    unknown = sorted(set(value) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown shovel key(s): {', '.join(unknown)}")
    for key in ("src-protocol", "dest-protocol"):
        if value.get(key, "amqp091") != "amqp091":
            raise ValueError(f"'{key}': only amqp091 is supported")
    src_queue, src_exchange = _str(value, "src-queue"), _str(value, "src-exchange")
    if (src_queue is None) == (src_exchange is None):
        raise ValueError("exactly one of 'src-queue' and 'src-exchange' is required")
    dest_queue, dest_exchange = _str(value, "dest-queue"), _str(value, "dest-exchange")
    if dest_queue is not None and dest_exchange is not None:
        raise ValueError("'dest-queue' and 'dest-exchange' cannot both be set")
    ack_mode = value.get("ack-mode", "on-confirm")
    if ack_mode not in ACK_MODES:
        raise ValueError(f"'ack-mode' must be one of {', '.join(ACK_MODES)}")
    delete_after = value.get("src-delete-after", value.get("delete-after", "never"))
    if not (delete_after in ("never", "queue-length")
            or (isinstance(delete_after, int) and not isinstance(delete_after, bool) and delete_after >= 0)):
        raise ValueError("'src-delete-after' must be \"never\", \"queue-length\" or a non-negative integer")
    if delete_after == "queue-length" and src_queue is None:
        raise ValueError("'src-delete-after': \"queue-length\" needs 'src-queue'")
    delay = value.get("reconnect-delay", 5)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise ValueError("'reconnect-delay' must be a non-negative number of seconds")
    prefetch = _count(value, "src-prefetch-count", _count(value, "prefetch-count", 1000))
    return ShovelSpec(
        src_uris=_uris(value, "src-uri"), dest_uris=_uris(value, "dest-uri"),
        src_queue=src_queue, src_exchange=src_exchange,
        src_exchange_key=_str(value, "src-exchange-key") or "#", src_queue_args=_table(value, "src-queue-args"),
        dest_queue=dest_queue, dest_exchange=dest_exchange, dest_exchange_key=_str(value, "dest-exchange-key"),
        dest_queue_args=_table(value, "dest-queue-args"), ack_mode=ack_mode, prefetch_count=prefetch or 1000,
        delete_after=delete_after, reconnect_delay=float(delay), consumer_args=_table(value, "src-consumer-args"),
        publish_properties=_publish_properties(value),
        forward_headers=_flag(value, "dest-add-forward-headers", "add-forward-headers"),
        timestamp_header=_flag(value, "dest-add-timestamp-header"), name=name, vhost=vhost)


def rewrite_properties(spec: ShovelSpec, props_raw: bytes, src_uri: str, dest_uri: str, now: float) -> bytes:
    """A forwarded message's properties under ``dest-publish-properties`` (set), and with RabbitMQ
    3.10's ``x-shovelled`` (a table about this shovel, prepended to the list) and
    ``x-shovelled-timestamp`` (seconds) headers when asked for."""
    props = decode_properties(props_raw)
    if spec.publish_properties:
        props = dataclasses.replace(props, **dict(spec.publish_properties))
    if spec.forward_headers or spec.timestamp_header:
        headers = dict(props.headers or {})
        if spec.forward_headers:
            table: dict[str, Any] = {"shovelled-by": NODE_NAME, "shovel-type": "dynamic", "shovel-name": spec.name,
                                     "shovel-vhost": spec.vhost, "src-uri": redact(src_uri)}
            if spec.src_queue is not None:
                table["src-queue"] = spec.src_queue
            else:
                table["src-exchange"] = spec.src_exchange or ""
                table["src-exchange-key"] = spec.src_exchange_key
            table["dest-uri"] = redact(dest_uri)
            if spec.dest_queue is not None:
                table["dest-queue"] = spec.dest_queue
            if spec.dest_exchange is not None:
                table["dest-exchange"] = spec.dest_exchange
            if spec.dest_exchange_key is not None:
                table["dest-exchange-key"] = spec.dest_exchange_key
            headers["x-shovelled"] = [table, *(headers.get("x-shovelled") or [])]
        if spec.timestamp_header:
            headers["x-shovelled-timestamp"] = int(now)
        props = dataclasses.replace(props, headers=headers)
    return encode_properties(props)


@dataclass(slots=True)
class Ledger:
    """One connection pair's forwarding state. The source's delivery tags wait here, by the
    destination's publish sequence number, until the destination confirms them (``on-confirm``);
    ``remaining`` counts down to the self-deletion of ``src-delete-after`` (None: never)."""
    ack_mode: str
    remaining: int | None
    next_seq: int = 1
    waiting: dict[int, int] = field(default_factory=dict)  # dest publish seq -> source delivery tag
    forwarded: int = 0  # published to the destination (since the shovel started)
    acked: int = 0  # settled at the source (on-confirm: confirmed by the destination)

    def wants(self) -> bool:
        """Whether the next delivery is to be forwarded: past the count it is left unacked, and
        goes back to the source queue when the link closes."""
        return self.remaining is None or self.forwarded < self.remaining

    def published(self, src_tag: int) -> list[tuple[int, bool]]:
        """A delivery was published to the destination: the source acks to send now, as
        (tag, multiple). Under ``on-confirm`` none until the confirm comes."""
        self.forwarded += 1
        if self.ack_mode == "on-confirm":
            self.waiting[self.next_seq] = src_tag
            self.next_seq += 1
            return []
        self.acked += 1
        return [(src_tag, False)] if self.ack_mode == "on-publish" else []

    def confirmed(self, seq: int, multiple: bool, ack: bool) -> tuple[list[int], int | None]:
        """The destination confirmed (``ack``) or refused ``seq`` (and, if ``multiple``, all
        before it): the source tags to settle one by one, and a tag to settle with ``multiple``
        (every earlier tag still waiting is covered too, as the waiting seqs and their tags rise
        together). A refused message goes back to the source and no longer counts as forwarded."""
        if not multiple:
            tag = self.waiting.pop(seq, None)
            singles, last, n = ([], None, 0) if tag is None else ([tag], None, 1)
        else:
            covered = [s for s in self.waiting if s <= seq]  # the oldest: dicts keep insertion order
            last = self.waiting[covered[-1]] if covered else None
            for s in covered:
                del self.waiting[s]
            singles, n = [], len(covered)
        if ack:
            self.acked += n
        else:
            self.forwarded -= n
        return singles, last

    def done(self) -> bool:
        """The count of ``src-delete-after`` is reached and settled at the source."""
        return self.remaining is not None and self.acked >= self.remaining and not self.waiting
