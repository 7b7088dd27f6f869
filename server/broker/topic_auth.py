"""RabbitMQ's topic authorisation: routing keys published to a topic exchange checked against the
user's topic permissions for that exchange (``auth.TopicPermission``, owned by the user registry).

Only users with topic permissions on an exchange are restricted there, so the publish paths call
this only while some topic permission exists at all (one dict's truthiness per publish otherwise).
"""

from __future__ import annotations

from headrace.server.auth import UserRegistry

from . import errors
from .vhost import VHost

__all__ = ["check_topic_write"]


def check_topic_write(users: UserRegistry, vhost: VHost, user: str, exchange: str, routing_key: str) -> None:
    """The registry is the caller's (its broker's): a vhost does not hand out its broker's users."""
    rule = users.topic_permission(user, vhost.name, exchange)
    if rule is None or exchange not in vhost.exchanges or vhost.exchange_type(exchange) != "topic":
        return
    if not rule.allows("write", routing_key, user, vhost.name):
        raise errors.access_refused(f"write access to topic '{routing_key}' in exchange '{exchange}' in vhost "
                                    f"'{vhost.name}' refused for user '{user}'")
