"""Policies and operator policies: which one applies to a queue or exchange, and what it changes.

RabbitMQ 3.10's rules, kept here in one place:
- A policy applies to the queues and/or exchanges (``apply-to``) whose name its ``pattern`` (an
  unanchored regular expression) matches; of those, only the one with the highest priority. The
  same holds separately for operator policies.
- A policy and an operator policy that set the same key merge to the lower value (operator
  policies may only set the numeric limits below: they cap what users choose).
- A policy and a client's ``x-`` argument that set the same key: the lower value for the numeric
  limits (``message-ttl``, ``expires``, ``max-length``, ``max-length-bytes``, ``delivery-limit``);
  the argument wins for ``dead-letter-exchange``, ``dead-letter-routing-key``, ``overflow`` and
  ``alternate-exchange`` (rabbit_amqqueue_process' ``res_min``/``res_arg``, rabbit_policy:get_arg).
- On a stream, the policy wins for ``max-age``, ``max-length-bytes`` and
  ``stream-max-segment-size-bytes`` (rabbit_stream_queue's ``policy_precedence``).
- Publish deduplication (dedup.py) has no RabbitMQ or LavinMQ policy keys; ours are
  ``message-deduplication``, ``deduplication-cache-size``, ``deduplication-cache-ttl`` and
  ``deduplication-header``, for exchanges and queues; the object's own ``x-`` argument wins.

Rule 1: the ``PolicyStore`` (one per broker) owns every vhost's policies; only ``set``, ``clear``
and ``drop_vhost`` change them (through ``Broker.set_policy``/``clear_policy``).
Rule 2: matching and merging are pure and synchronous; ``apply_policies`` hands a queue its new
effective arguments through the delivery owner (``Delivery.apply_args``), which settles what a lower
limit drops, and sets exchanges' alternates.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headrace.exchanges import Exchange
from headrace.persistence.tier_manifest import public_uri, tier_uri_problem
from headrace.queues import QueueArgs, QueueArgumentError

from .compat import COMPAT_3_10, Compat
from .dedup import Dedup, window_id
from .delivery import Delivery
from .vhost_view import VHostView

__all__ = [
    "Applied", "Policy", "apply_queue_dedup", "PolicyError", "PolicyStore", "apply_exchange_policy", "apply_policies", "dedup_arguments", "effective_alternate",
    "effective_queue_arguments", "MIRRORING_KEYS", "queue_args", "refuse_mirroring", "stream_arguments", "tier_uri_ok", "trim_recovered",
]

APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
_APPLY_TO_TYPE = {"classic": "classic_queues", "quorum": "quorum_queues", "stream": "streams"}
MIN_KEYS = ("message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit")  # lower wins
# the x-argument wins (consumer-timeout and delayed-retry-*: RabbitMQ 4.x's keys)
ARG_KEYS = ("dead-letter-exchange", "dead-letter-routing-key", "overflow", "consumer-timeout", "delayed-retry-type",
            "delayed-retry-min", "delayed-retry-max")
OPERATOR_KEYS = frozenset({*MIN_KEYS, "max-in-memory-length", "max-in-memory-bytes"})
_MAX_AGE = re.compile(r"^[0-9]+[YMDhms]$")


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


# key -> (accepts the value, RabbitMQ's complaint about one it does not): rabbit_policies.erl
_VALIDATORS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "alternate-exchange": (_is_str, "is not a valid alternate exchange name"),
    "dead-letter-exchange": (_is_str, "is not a valid dead letter exchange name"),
    "dead-letter-routing-key": (_is_str, "is not a valid dead letter routing key"),
    "message-ttl": (lambda v: _is_int(v, 0), "is not a valid message TTL"),
    "expires": (lambda v: _is_int(v, 1), "is not a valid queue expiry"),
    "max-length": (lambda v: _is_int(v, 0), "is not a valid maximum length"),
    "max-length-bytes": (lambda v: _is_int(v, 0), "is not a valid maximum length in bytes"),
    "max-in-memory-length": (lambda v: _is_int(v, 0), "is not a valid maximum memory in bytes"),
    "max-in-memory-bytes": (lambda v: _is_int(v, 0), "is not a valid maximum memory in bytes"),
    "queue-mode": (lambda v: v in ("default", "lazy"), "is not a valid queue-mode value"),  # accepted, ignored
    "overflow": (lambda v: v in ("drop-head", "reject-publish", "reject-publish-dlx"), "is not a valid overflow value"),
    "delivery-limit": (lambda v: _is_int(v, -1), "is not a valid delivery limit"),
    "consumer-timeout": (lambda v: _is_int(v, 1), "is not a valid consumer timeout"),
    "delayed-retry-type": (lambda v: v in ("disabled", "all", "failed", "returned"),
                           "is not a valid delayed retry type"),
    "delayed-retry-min": (lambda v: _is_int(v, 0), "is not a valid delayed retry minimum"),
    "delayed-retry-max": (lambda v: _is_int(v, 0), "is not a valid delayed retry maximum"),
    "max-age": (lambda v: isinstance(v, str) and bool(_MAX_AGE.match(v)), "is not a valid max age"),
    "max-segment-size": (lambda v: _is_int(v, 0), "is not a valid segment size"),
    "stream-max-segment-size-bytes": (lambda v: _is_int(v, 0), "is not a valid segment size"),
    "queue-leader-locator": (lambda v: v in ("client-local", "random", "least-leaders"),
                             "is not a valid queue leader locator value"),
    "initial-cluster-size": (lambda v: _is_int(v, 0), "is not a valid cluster size"),
    "message-deduplication": (lambda v: isinstance(v, bool), "is not a valid message deduplication value"),
    "deduplication-cache-size": (lambda v: _is_int(v, 1), "is not a valid deduplication cache size"),
    "deduplication-cache-ttl": (lambda v: _is_int(v, 1), "is not a valid deduplication cache TTL"),
    "deduplication-header": (lambda v: isinstance(v, str) and bool(v), "is not a valid deduplication header"),
    # classic mirroring (RabbitMQ 3.10 accepts them; one node has no mirror to make, so they change
    # nothing; 4.0 removed them: Broker.set_policy refuses them under 4.x semantics)
    "ha-mode": (lambda v: v in ("all", "exactly", "nodes"), "is not a valid ha-mode value"),
    "ha-params": (lambda v: _is_int(v, 1) or (isinstance(v, list) and all(_is_str(n) for n in v)),
                  "is not a valid ha-params value"),
    "ha-sync-mode": (lambda v: v in ("manual", "automatic"), "is not a valid ha-sync-mode value"),
    "ha-sync-batch-size": (lambda v: _is_int(v, 1), "is not a valid ha-sync-batch-size value"),
    "ha-promote-on-shutdown": (lambda v: v in ("always", "when-synced"), "is not a valid ha-promote-on-shutdown value"),
    "ha-promote-on-failure": (lambda v: v in ("always", "when-synced"), "is not a valid ha-promote-on-failure value"),
    # exchange federation (federation.py): an upstream's name, or an upstream set's (``all``)
    "federation-upstream": (lambda v: isinstance(v, str) and bool(v), "is not a valid federation upstream value"),
    "federation-upstream-set": (lambda v: isinstance(v, str) and bool(v), "is not a valid federation upstream set value"),
    # tiered segments of a mirrored exchange's or a stream's log (server/net/tier_uploader.py)
    "tier-uri": (lambda v: tier_uri_ok(v), "is not a valid tier URI (file:///absolute/path, s3://bucket/prefix, "
                                           "hdfs://host/path, gs://bucket/prefix)"),
    "tier-local-max-bytes": (lambda v: _is_int(v, 0), "is not a valid local size in bytes"),
}
TIER_SCHEMES = ("file", "s3", "hdfs", "viewfs", "gs", "gcs", "abfs", "abfss")


def tier_uri_ok(value: Any) -> bool:
    """A ``pyarrow.fs`` URI of a folder: a scheme it knows, and an absolute path for ``file``."""
    if not isinstance(value, str) or "://" not in value:
        return False
    scheme, _, rest = value.partition("://")
    if scheme not in TIER_SCHEMES or not rest:
        return False
    return scheme != "file" or rest.startswith("/")
MIRRORING_KEYS = tuple(key for key in _VALIDATORS if key.startswith("ha-"))
STREAM_KEYS = ("max-age", "max-length-bytes", "stream-max-segment-size-bytes")  # the policy wins
# policy key -> the declare argument it stands for (dedup.py); the argument wins
DEDUP_KEYS = {"message-deduplication": "x-message-deduplication", "deduplication-cache-size": "x-cache-size",
              "deduplication-cache-ttl": "x-cache-ttl", "deduplication-header": "x-deduplication-header"}


class PolicyError(ValueError):
    """A refused policy; ``str()`` is RabbitMQ's text (the HTTP API's 400 reason)."""


def erlang(value: Any) -> str:
    """A JSON value as RabbitMQ's ``~p`` prints it once decoded (strings are binaries)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return '<<"' + value.replace("\\", "\\\\").replace('"', '\\"') + '">>'
    if isinstance(value, Mapping):
        return "[" + ",".join("{" + erlang(str(k)) + "," + erlang(v) + "}" for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join(erlang(v) for v in value) + "]"
    return str(value)


def _failed(text: str) -> PolicyError:
    return PolicyError(f"Validation failed\n\n{text}\n")


def validate_definition(definition: Any, *, operator: bool) -> dict[str, Any]:
    if not isinstance(definition, Mapping):
        raise _failed(f"definition must be a dictionary: {erlang(definition)}")
    if not definition:
        raise _failed("no policy provided")
    allowed = OPERATOR_KEYS if operator else _VALIDATORS.keys()
    for key, value in definition.items():
        if key in allowed:
            accepts, complaint = _VALIDATORS[key]
            if not accepts(value):
                raise _failed(f"{erlang(value)} {complaint}")
    uri = definition.get("tier-uri")
    if "tier-uri" in allowed and isinstance(uri, str):
        problem = tier_uri_problem(uri)
        if problem is not None:
            raise _failed(f"{erlang(public_uri(uri))} is not a valid tier URI: {problem}")
    unknown = {k: v for k, v in definition.items() if k not in allowed}
    if unknown:
        raise _failed(f"{erlang(unknown)} are not recognised policy settings")
    return dict(definition)


@dataclass(frozen=True, slots=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern[str] = field(compare=False, repr=False, default=re.compile(""))

    @classmethod
    def parse(cls, vhost: str, name: str, body: Any, *, operator: bool = False) -> Policy:
        """RabbitMQ's body ``{"pattern", "definition", "priority", "apply-to"}``, validated."""
        if not isinstance(body, Mapping):
            raise _failed(f"policy must be a dictionary: {erlang(body)}")
        for key in ("pattern", "definition"):
            if key not in body:
                raise _failed(f"Key {erlang(key)} not found in {name}")
        pattern = body["pattern"]
        if not isinstance(pattern, str):
            raise _failed(f"{erlang('pattern')} should be a regular expression but is {erlang(pattern)}")
        try:
            regex = re.compile(pattern)
        except re.error:
            raise _failed(f"{erlang('pattern')} should be a regular expression but is invalid: "
                          f"{erlang(pattern)}") from None
        priority = body.get("priority", 0)
        if isinstance(priority, str) and priority.lstrip("-").isdigit():
            priority = int(priority)  # the management UI sends form values as strings
        if not _is_int(priority, -(2**31)):
            raise _failed(f"{erlang('priority')} should be a number, actually was {erlang(priority)}")
        apply_to = body.get("apply-to", "all")
        if apply_to not in APPLY_TO:
            raise _failed(f'{erlang(apply_to)} is not a valid "apply-to" value')
        definition = validate_definition(body["definition"], operator=operator)
        return cls(vhost, name, pattern, definition, priority, apply_to, regex)

    def covers(self, kind: str, name: str, queue_type: str = "classic") -> bool:
        """``kind`` is "queue" (of ``queue_type`` classic, quorum or stream) or "exchange"."""
        if kind == "queue":
            ok = self.apply_to in ("all", "queues") or self.apply_to == _APPLY_TO_TYPE.get(queue_type)
        else:
            ok = self.apply_to in ("all", "exchanges")
        return ok and self.regex.search(name) is not None

    def as_json(self) -> dict[str, Any]:
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern, "apply-to": self.apply_to,
                "definition": dict(self.definition), "priority": self.priority}


@dataclass(frozen=True, slots=True)
class Applied:
    """What applies to one object: its policy, its operator policy, and their merged definition."""
    policy: Policy | None = None
    operator_policy: Policy | None = None

    @property
    def definition(self) -> dict[str, Any]:
        merged = dict(self.policy.definition) if self.policy else {}
        if self.operator_policy is not None:
            for key, value in self.operator_policy.definition.items():
                merged[key] = min(merged[key], value) if key in merged and key in MIN_KEYS else value
        return merged


class PolicyStore:
    def __init__(self) -> None:
        self._policies: dict[bool, dict[tuple[str, str], Policy]] = {False: {}, True: {}}

    def set(self, vhost: str, name: str, body: Any, *, operator: bool = False) -> Policy:
        policy = Policy.parse(vhost, name, body, operator=operator)
        self._policies[operator][(vhost, name)] = policy
        return policy

    def clear(self, vhost: str, name: str, *, operator: bool = False) -> bool:
        return self._policies[operator].pop((vhost, name), None) is not None

    def get(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        return self._policies[operator].get((vhost, name))

    def list(self, vhost: str | None = None, *, operator: bool = False) -> list[Policy]:
        return sorted((p for p in self._policies[operator].values() if vhost is None or p.vhost == vhost),
                      key=lambda p: (p.vhost, p.name))

    def drop_vhost(self, vhost: str) -> None:
        for policies in self._policies.values():
            for key in [k for k in policies if k[0] == vhost]:
                del policies[key]

    def _best(self, vhost: str, kind: str, name: str, queue_type: str, operator: bool) -> Policy | None:
        best: Policy | None = None
        for policy in self._policies[operator].values():
            if policy.vhost == vhost and policy.covers(kind, name, queue_type) and (
                    best is None or (policy.priority, best.name) > (best.priority, policy.name)):
                best = policy  # the highest priority; among equals, the first name (deterministic)
        return best

    def applied(self, vhost: str, kind: str, name: str, queue_type: str = "classic") -> Applied:
        if not self._policies[False] and not self._policies[True]:
            return _NONE
        return Applied(self._best(vhost, kind, name, queue_type, False),
                       self._best(vhost, kind, name, queue_type, True))


_NONE = Applied()


def refuse_mirroring(body: Any) -> None:
    """RabbitMQ 4.0 removed classic mirroring: its keys are settings it does not recognise."""
    definition = body.get("definition") if isinstance(body, Mapping) else None
    if isinstance(definition, Mapping):
        mirroring = {k: v for k, v in definition.items() if k in MIRRORING_KEYS}
        if mirroring:
            raise _failed(f"{erlang(mirroring)} are not recognised policy settings")


def effective_queue_arguments(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """The ``x-`` arguments a queue runs with: its own, with the policy's keys merged per key."""
    out = dict(arguments)
    for key in MIN_KEYS + ARG_KEYS:
        if key not in definition:
            continue
        arg, value = "x-" + key, definition[key]
        current = out.get(arg)
        if current is None:
            out[arg] = value
        elif key in MIN_KEYS and _is_int(current, 0):
            out[arg] = min(current, value)
    if "x-dead-letter-routing-key" in out and "x-dead-letter-exchange" not in out:
        del out["x-dead-letter-routing-key"]  # a policy's routing key means nothing without a DLX
    return out


def stream_arguments(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """A stream's retention and segment arguments under its policy: the policy's value wins."""
    out = dict(arguments)
    for key in STREAM_KEYS:
        if key in definition:
            out["x-" + key] = definition[key]
    return out


def dedup_arguments(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any] | None:
    """An exchange's or queue's dedup arguments under its policy (its own win), or None when the
    policy sets no dedup key."""
    if not any(key in definition for key in DEDUP_KEYS):
        return None
    out = {arg: definition[key] for key, arg in DEDUP_KEYS.items() if key in definition}
    out.update((arg, arguments[arg]) for arg in DEDUP_KEYS.values() if arg in arguments)
    return out


def effective_alternate(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> str | None:
    """An exchange's alternate: its own ``alternate-exchange`` argument, else the policy's."""
    own = arguments.get("alternate-exchange")
    if isinstance(own, bytes):
        own = own.decode()
    if isinstance(own, str) and own:
        return own
    value = definition.get("alternate-exchange")
    return value if isinstance(value, str) and value else None


def queue_args(store: PolicyStore, vhost: str, name: str, arguments: Mapping[str, Any], own: QueueArgs,
               queue_type: str = "classic", compat: Compat = COMPAT_3_10) -> QueueArgs:
    """The ``QueueArgs`` a queue runs with under the policies that apply to it now (``own`` is its
    declared arguments, already validated), with the compat release's defaults for its type."""
    definition = store.applied(vhost, "queue", name, queue_type).definition
    if definition:
        try:
            own = QueueArgs.parse(effective_queue_arguments(arguments, definition), name)
        except QueueArgumentError:
            pass
    return compat.queue_defaults(own, queue_type)


def apply_policies(store: PolicyStore, delivery: Delivery, vhost: VHostView, now: float,
                   compat: Compat = COMPAT_3_10) -> None:
    """A policy changed: every queue and exchange of ``vhost`` takes its effective arguments now
    (a lower max-length drops or refuses at once per the overflow mode; a new DLX takes the next
    dead letter; an alternate exchange takes the next unroutable message)."""
    for queue in list(vhost.queues.values()):
        args = queue_args(store, vhost.name, queue.name, queue.arguments, QueueArgs.parse(queue.arguments, queue.name),
                          queue.queue_type, compat)
        if args != queue.args:
            delivery.apply_args(vhost, queue, args, now)
        apply_queue_dedup(store, delivery.dedup, vhost.name, queue.name, queue.arguments, queue.queue_type)
    for exchange in vhost.exchanges.values():
        if exchange.name:
            apply_exchange_policy(store, delivery.dedup, vhost.name, exchange)


def trim_recovered(delivery: Delivery, vhost: VHostView, now: float) -> None:
    """At start, after the store's messages are back: a queue over its limit (a policy lowered
    it while the broker was down, or came with the definitions) is trimmed now, as a changed
    policy would trim it, not at its next publish."""
    for queue in list(vhost.queues.values()):
        if queue.args.max_length is not None or queue.args.max_length_bytes is not None:
            delivery.apply_args(vhost, queue, queue.args, now)


def apply_exchange_policy(store: PolicyStore, dedup: Dedup, vhost: str, exchange: Exchange) -> None:
    definition = store.applied(vhost, "exchange", exchange.name).definition
    exchange.alternate = effective_alternate(exchange.arguments, definition)
    dedup.set_policy_arguments(window_id("exchange", vhost, exchange.name),
                               dedup_arguments(exchange.arguments, definition))


def apply_queue_dedup(store: PolicyStore, dedup: Dedup, vhost: str, name: str, arguments: Mapping[str, Any],
                      queue_type: str) -> None:
    """A policy's dedup keys for a queue (at declare, and when a policy changes)."""
    definition = store.applied(vhost, "queue", name, queue_type).definition
    dedup.set_policy_arguments(window_id("queue", vhost, name), dedup_arguments(arguments, definition))
