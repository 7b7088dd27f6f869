"""A redeclare's equivalence check: does a declare of an existing exchange or queue ask for the same
thing, and if not, which flag or argument differs, with RabbitMQ 3.10's 406 and 405 texts.

Owned by no state: these are pure functions of the declare and the object it names. They sit apart
from ``vhost.py`` because they are RabbitMQ's rules (``rabbit_exchange:assert_equivalence``,
``rabbit_amqqueue:assert_equivalence`` and ``declare_args``) rather than the vhost's bookkeeping of
names: the vhost asks, and on a match hands back the object it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headrace.exchanges import Exchange
from headrace.queues import Destination

from . import errors

__all__ = ["EQUIVALENCE_ARGS", "check_exchange", "check_queue"]

# queue arguments a redeclare must repeat with the same value (RabbitMQ's declare_args): omitting
# one the queue was declared with is 406 PRECONDITION_FAILED
EQUIVALENCE_ARGS = frozenset({
    "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
    "x-single-active-consumer", "x-delivery-limit",
})


def check_exchange(existing: Exchange, vhost: str, *, declared_type: str, current_type: str, durable: bool,
                   auto_delete: bool, internal: bool, arguments: Mapping[str, Any]) -> None:
    """406 unless the declare matches ``existing``: its type as declared (``x-delayed-message`` for a
    delayed exchange, not the type it routes by), then its flags, then its arguments."""
    name = existing.name
    if current_type != declared_type:
        raise errors.inequivalent("type", "exchange", name, vhost, declared_type, current_type)
    if existing.equivalent(existing.TYPE, durable, auto_delete, internal, arguments):
        return
    for arg, got, cur in (("durable", durable, existing.durable),
                          ("auto_delete", auto_delete, existing.auto_delete),
                          ("internal", internal, existing.internal)):
        if got != cur:
            raise errors.inequivalent(arg, "exchange", name, vhost, got, cur)
    raise errors.inequivalent("arguments", "exchange", name, vhost, arguments, existing.arguments)


def check_queue(existing: Destination, vhost: str, *, exclusive: bool, durable: bool, auto_delete: bool,
                arguments: Mapping[str, Any]) -> None:
    """405 if the exclusive flag differs (RabbitMQ's strict check, not 406), else 406 for the first
    flag or checked argument that differs. The caller has checked the queue's exclusive owner."""
    name = existing.name
    if exclusive != (existing.exclusive_owner is not None):
        raise errors.resource_locked(name, vhost)
    for arg, got, cur in (("durable", durable, existing.durable),
                          ("auto_delete", auto_delete, existing.auto_delete)):
        if got != cur:
            raise errors.inequivalent(arg, "queue", name, vhost, got, cur)
    for key in sorted(set(arguments) | set(existing.arguments)):
        # an argument the queue has but the redeclare omits is inequivalent too, for the
        # arguments RabbitMQ checks; unknown x- arguments are compared only when given
        if not key.startswith("x-") or (key not in arguments and key not in EQUIVALENCE_ARGS):
            continue
        if arguments.get(key) != existing.arguments.get(key):
            raise errors.inequivalent(key, "queue", name, vhost, arguments.get(key), existing.arguments.get(key))
