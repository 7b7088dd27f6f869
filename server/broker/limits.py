"""The broker's limits: how many connections, channels, queues and exchanges may exist.

Two sources, as in RabbitMQ: the broker-wide ``Limits`` from the settings, and the vhost and user
limits that are runtime parameters (``RuntimeParameters``, parameters.py). The ``Broker`` owns both
and asks these functions before it lets a connection, channel, queue or exchange be created; they
only read, and answer with the refusal RabbitMQ gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from headrace.server.amqp.errors import ChannelException, ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.auth import User

from .parameters import RuntimeParameters
from .vhost import VHost

__all__ = ["Limits", "channel_refused", "check_connection", "check_declare", "connection_refused"]


@dataclass(frozen=True, slots=True)
class Limits:
    max_queues_per_vhost: int = 100_000
    max_exchanges_per_vhost: int = 100_000
    max_connections: int = 10_000
    max_connections_per_user: int | None = None
    max_tx_bytes: int = 64 << 20  # uncommitted publishes one transactional channel may hold
    consumer_timeout_ms: int | None = None  # a delivery unacked longer closes its channel (None: off)
    stream_handover_timeout_ms: int = 10_000  # a stream group's demoted member holds its partition this long at most


def check_connection(limits: Limits, sessions: Iterable[Any], count: int, user: User) -> None:
    """530 NOT_ALLOWED at the broker's or the user's connection limit (``count`` connections open)."""
    if count >= limits.max_connections:
        raise ConnectionException(ReplyCode.NOT_ALLOWED,
                                  f"NOT_ALLOWED - connection limit ({limits.max_connections}) is reached", 10, 40)
    per_user = limits.max_connections_per_user
    if per_user is not None and sum(1 for s in sessions if s.user is user) >= per_user:
        raise ConnectionException(
            ReplyCode.NOT_ALLOWED,
            f"NOT_ALLOWED - connection limit ({per_user}) for user '{user.name}' is reached", 10, 40)


def check_declare(limits: Limits, parameters: RuntimeParameters, kind: str, vhost: VHost) -> None:
    """406 PRECONDITION_FAILED when one more of ``kind`` ("queues" or "exchanges") would pass a limit."""
    limit = parameters.vhost_limit(vhost.name, "max-queues") if kind == "queues" else None
    if limit is not None and len(vhost.queues) >= limit:  # RabbitMQ's set_vhost_limits max-queues
        raise ChannelException(ReplyCode.PRECONDITION_FAILED,
                               f"PRECONDITION_FAILED - cannot declare queue: queue limit in vhost "
                               f"'{vhost.name}' ({limit}) is reached")
    if kind == "queues" and len(vhost.queues) >= limits.max_queues_per_vhost:
        raise ChannelException(ReplyCode.PRECONDITION_FAILED,
                               f"PRECONDITION_FAILED - queue limit in vhost '{vhost.name}' "
                               f"({limits.max_queues_per_vhost}) is reached")
    if kind == "exchanges" and len(vhost.exchanges) >= limits.max_exchanges_per_vhost:
        raise ChannelException(ReplyCode.PRECONDITION_FAILED,
                               f"PRECONDITION_FAILED - exchange limit in vhost '{vhost.name}' "
                               f"({limits.max_exchanges_per_vhost}) is reached")


def connection_refused(parameters: RuntimeParameters, sessions: Iterable[Any], vhost: str, user: str) -> str | None:
    """Why one more connection of ``user`` to ``vhost`` would pass a vhost or user limit
    (RabbitMQ's max-connections), or None."""
    limit = parameters.vhost_limit(vhost, "max-connections")
    user_limit = parameters.user_limit(user, "max-connections")
    if limit is None and user_limit is None:
        return None  # the usual case: no walk over every open connection per connection opened
    sessions = list(sessions)
    if limit is not None and sum(1 for s in sessions if s.vhost.name == vhost) >= limit:
        return f"access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is reached"
    limit = user_limit
    if limit is not None and sum(1 for s in sessions if s.user.name == user) >= limit:
        return f"Connection refused for user '{user}': user connection limit ({limit}) is reached"
    return None


def channel_refused(parameters: RuntimeParameters, sessions: Iterable[Any], user: str, opening: Any) -> str | None:
    """Why one more channel of ``user`` would pass their max-channels limit, or None; the
    connection ``opening`` it may not be listed yet."""
    limit = parameters.user_limit(user, "max-channels")
    if limit is None:
        return None
    mine = {id(s): s for s in sessions if s.user is not None and s.user.name == user}
    mine[id(opening)] = opening
    if sum(len(s.channels) for s in mine.values()) >= limit:
        return f"number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
    return None
