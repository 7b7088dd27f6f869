"""The connection handshake: login (SASL PLAIN/AMQPLAIN), tune, and opening a vhost.

Rule 1: ``Handshake`` handles the channel-0 methods up to connection.open-ok and update-secret; it
sets the connection's user, client properties and vhost (its ``SessionState``), and asks the
session (``Opening``) to have the broker register the connection (the broker owns the connection
map and its limits) and to enter OPEN (the session owns the lifecycle).
Rule 2: every refusal is a ``ConnectionException`` with RabbitMQ's code and text; a login refused
earlier in the same batch leaves the session CLOSING, and a pipelined connection.open is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any, Protocol

from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.sasl import parse_response
from headrace.server.amqp.spec import ReplyCode
from headrace.server.auth import LoginThrottled, User

from .state import SessionState

__all__ = ["Handshake"]

log = logging.getLogger("headrace.session")


class Opening(Protocol):
    """What the handshake asks of the ``Session`` (which sits above it): the lifecycle and the
    broker's registration are the session's."""

    def in_handshake(self) -> bool: ...
    def register(self, user: User) -> None: ...
    def opened(self) -> None: ...


class Handshake:
    def __init__(self, session: SessionState, opening: Opening) -> None:
        self.session = session
        self.opening = opening

    def connection_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {
            m.ConnectionStartOk: self.start_ok,
            m.ConnectionTuneOk: self.tune_ok,
            m.ConnectionOpen: self.open,
            m.ConnectionUpdateSecret: self.update_secret,
        }

    def channel_handlers(self) -> dict[type, Callable[[Any, Any], None]]:
        return {}

    def start_ok(self, method: m.ConnectionStartOk) -> None:
        s = self.session
        s.client_properties = dict(method.client_properties or {})
        caps = s.client_properties.get("capabilities")
        s.capabilities = dict(caps) if isinstance(caps, dict) else {}
        username, password = parse_response(method.mechanism, method.response)
        try:
            user = s.broker.users.check(username, password)
        except LoginThrottled:
            log.warning("login refused for user '%s' from %s: too many failed logins", username, s.peer[0])
            raise ConnectionException(ReplyCode.ACCESS_REFUSED,
                                      "ACCESS_REFUSED - too many failed logins, try later", 10, 11) from None
        if user is not None and user.name in s.loopback_users and not _is_loopback(s.peer[0]):
            log.warning("user '%s' may only connect from localhost (peer %s)", user.name, s.peer[0])
            user = None
        if user is None:
            log.warning("login refused for user '%s' from %s", username, s.peer[0])
            raise ConnectionException(
                ReplyCode.ACCESS_REFUSED,
                f"ACCESS_REFUSED - Login was refused using authentication mechanism {method.mechanism}. "
                "For details see the broker logfile.", 10, 11)
        s.user = user
        conn = s.conn
        conn.send_method(0, m.ConnectionTune(channel_max=conn.channel_max, frame_max=conn.frame_max,
                                             heartbeat=conn.heartbeat))

    def tune_ok(self, method: m.ConnectionTuneOk) -> None:
        return None

    def open(self, method: m.ConnectionOpen) -> None:
        s = self.session
        if not self.opening.in_handshake():
            return  # the login was refused earlier in this batch (a pipelining client): already closing
        assert s.user is not None
        name = method.virtual_host or "/"
        vhost = s.broker.vhost(name)
        if vhost is None:
            raise ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - vhost {name} not found", 10, 40)
        if s.broker.users.permission(s.user.name, name) is None:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED,
                f"NOT_ALLOWED - access to vhost '{name}' refused for user '{s.user.name}'", 10, 40)
        refused = s.broker.connection_refused(name, s.user.name)  # the vhost's or user's max-connections
        if refused is not None:
            raise ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - {refused}", 10, 40)
        self.opening.register(s.user)  # raises 530 NOT_ALLOWED at a connection limit
        s.vhost = vhost
        self.opening.opened()
        s.conn.send_method(0, m.ConnectionOpenOk())

    def update_secret(self, method: m.ConnectionUpdateSecret) -> None:
        self.session.conn.send_method(0, m.ConnectionUpdateSecretOk())


def _is_loopback(host: str) -> bool:
    try:
        return ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"
