"""Exchange federation, as RabbitMQ's federation plugin: which links should run, sans-IO.

Owner: nothing here holds state. Upstreams are runtime parameters (``federation-upstream``, and
``federation-upstream-set`` for named sets); an exchange is federated by the policy keys
``federation-upstream`` or ``federation-upstream-set`` (``all``: every upstream of the vhost).
``federation_links`` reads the broker as it stands and answers one shovel-like link per
(federated exchange, upstream): consume from a durable queue on the upstream, bound to the
upstream exchange with the federated exchange's own binding keys, and publish into the local
exchange with the message's routing key, adding ``x-received-from`` and dropping a message that
already made ``max-hops`` hops (the shell's ``Shovels`` runs them, ``server/net/shovels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .core import Broker
from .node import NODE_NAME
from .shovels import FederationHop, ShovelSpec, parse_uri

__all__ = ["LinkKey", "federation_links", "parse_upstream", "parse_upstream_set", "queue_wants"]

UPSTREAM = "federation-upstream"
UPSTREAM_SET = "federation-upstream-set"
_KEYS = {"uri", "exchange", "max-hops", "prefetch-count", "reconnect-delay", "ack-mode", "expires", "message-ttl",
         "trust-user-id", "queue", "consumer-tag", "ha-policy", "bind-nowait", "resource-cleanup-mode",
         "channel-use-mode", "queue-type"}


@dataclass(frozen=True, slots=True)
class LinkKey:
    vhost: str
    exchange: str  # the federated exchange's name, or the federated queue's
    upstream: str
    kind: str = "exchange"  # or "queue"


def _positive(value: dict[str, Any], key: str, default: int | None) -> int | None:
    v = value.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"'{key}' must be a positive integer")
    return v


def parse_upstream(value: Any) -> dict[str, Any]:
    """RabbitMQ's upstream keys, checked: ValueError says what is wrong."""
    if not isinstance(value, dict):
        raise ValueError("an upstream's value must be an object")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise ValueError(f"unknown upstream key(s): {', '.join(unknown)}")
    uris = value.get("uri")
    uris = [uris] if isinstance(uris, str) else uris
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise ValueError("'uri' is required: an AMQP URI or a list of them")
    for u in uris:
        if parse_uri(u, "/").host is None:
            raise ValueError("'uri' must name the upstream broker's host")
    if value.get("exchange") is not None and not isinstance(value["exchange"], str):
        raise ValueError("'exchange' must be a string")
    if value.get("ack-mode", "on-confirm") not in ("on-confirm", "on-publish", "no-ack"):
        raise ValueError("'ack-mode' must be one of on-confirm, on-publish, no-ack")
    for key, default in (("max-hops", 1), ("prefetch-count", 1000), ("expires", None), ("message-ttl", None)):
        _positive(value, key, default)
    delay = value.get("reconnect-delay", 5)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise ValueError("'reconnect-delay' must be a non-negative number of seconds")
    return {**value, "uri": uris}


def parse_upstream_set(value: Any) -> list[str]:
    """A set's value: a list of ``{"upstream": name}`` (per-upstream overrides are not applied)."""
    if not isinstance(value, list) or not all(isinstance(e, dict) and isinstance(e.get("upstream"), str)
                                              for e in value):
        raise ValueError('an upstream set is a list of {"upstream": name} objects')
    return [e["upstream"] for e in value]


def _upstream_names(broker: Broker, vhost: str, definition: dict[str, Any]) -> list[str]:
    params = broker.parameters.parameters
    name = definition.get(UPSTREAM)
    if isinstance(name, str):
        return [name]
    set_name = definition.get(UPSTREAM_SET)
    if set_name == "all":
        return sorted(n for (c, v, n) in params if c == UPSTREAM and v == vhost)
    try:
        return parse_upstream_set(params.get((UPSTREAM_SET, vhost, str(set_name))))
    except ValueError:
        return []


def federation_links(broker: Broker) -> dict[LinkKey, ShovelSpec]:
    """Every link that should run now. An upstream that is missing or invalid gives no link."""
    params = broker.parameters.parameters
    if not any(c == UPSTREAM for (c, _, _) in params):
        return {}
    links: dict[LinkKey, ShovelSpec] = {}
    _queue_links(broker, links)
    for vhost_name, vhost in broker.vhosts.items():
        for name, exchange in vhost.exchanges.items():
            if not name or name.startswith("amq."):
                continue
            policy = broker.policies.applied(vhost_name, "exchange", name).policy
            if policy is None or not ({UPSTREAM, UPSTREAM_SET} & policy.definition.keys()):
                continue
            bindings = tuple(sorted({(b.routing_key, tuple(sorted(b.arguments_dict().items())))
                                     for b in exchange.bindings()}, key=repr))
            for upstream in _upstream_names(broker, vhost_name, policy.definition):
                try:
                    value = parse_upstream(params.get((UPSTREAM, vhost_name, upstream)))
                except ValueError:
                    continue
                up_exchange = value.get("exchange") or name
                args = {k: v for k, v in (("x-expires", value.get("expires")),
                                          ("x-message-ttl", value.get("message-ttl"))) if v is not None}
                # RabbitMQ's name, with the vhost and exchange when they tell two links apart
                queue = f"federation: {up_exchange} -> {NODE_NAME}" + (f" ({vhost_name})" if vhost_name != "/" else "") + (
                    f" {name}" if name != up_exchange else "")
                hop = FederationHop(queue=value.get("queue") or queue,
                                    bindings=bindings if exchange.TYPE != "fanout" else (("", ()),),
                                    max_hops=int(value.get("max-hops", 1)), upstream=upstream,
                                    upstream_exchange=up_exchange, exchange_type=exchange.TYPE)
                links[LinkKey(vhost_name, name, upstream)] = ShovelSpec(
                    src_uris=tuple(value["uri"]), dest_uris=("amqp://",), src_exchange=up_exchange,
                    src_queue_args=args, dest_exchange=name, ack_mode=value.get("ack-mode", "on-confirm"),
                    prefetch_count=int(value.get("prefetch-count", 1000)),
                    reconnect_delay=float(value.get("reconnect-delay", 5)), federation=hop)
    return links


def _queue_links(broker: Broker, links: dict[LinkKey, ShovelSpec]) -> None:
    """Queue federation (RabbitMQ's plugin, 3.10): a queue a federation policy matches fetches from
    the upstream queue of the same name (or the upstream's ``queue``), declared there with this
    queue's arguments, and only while it has consumers with credit left and no message ready
    (``ShovelSpec.on_demand``; the shell's link asks ``queue_wants``)."""
    params = broker.parameters.parameters
    for vhost_name, vhost in broker.vhosts.items():
        for name, queue in vhost.queues.items():
            policy = broker.policies.applied(vhost_name, "queue", name).policy
            if policy is None or not ({UPSTREAM, UPSTREAM_SET} & policy.definition.keys()):
                continue
            if queue.exclusive_owner is not None or queue.log_info() is not None:  # a stream is read, not fetched
                continue
            for upstream in _upstream_names(broker, vhost_name, policy.definition):
                try:
                    value = parse_upstream(params.get((UPSTREAM, vhost_name, upstream)))
                except ValueError:
                    continue
                links[LinkKey(vhost_name, name, upstream, "queue")] = ShovelSpec(
                    src_uris=tuple(value["uri"]), dest_uris=("amqp://",), src_queue=value.get("queue") or name,
                    src_queue_args=dict(queue.arguments), dest_queue=name, ack_mode=value.get("ack-mode", "on-confirm"),
                    prefetch_count=int(value.get("prefetch-count", 1000)),
                    reconnect_delay=float(value.get("reconnect-delay", 5)), on_demand=True)


def queue_wants(broker: Broker, vhost: str, name: str) -> bool:
    """Whether a federated queue wants messages from its upstream: a consumer with credit left
    and nothing ready to give it."""
    v = broker.vhosts.get(vhost)
    queue = v.queues.get(name) if v is not None else None
    return queue is not None and not queue.deleted and queue.messages_ready == 0 \
        and any(c.can_take() for c in queue.consumers())
