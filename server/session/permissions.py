"""What the connection's user may do in its vhost: one check with a per-connection cache.

Rule 1: a ``Permissions`` object (one per connection, made by its ``SessionState``) owns the
cached decisions; the broker's user registry owns the rules. Any user, permission or vhost change
clears the cache (``changed``), so a revoked permission applies to the very next operation.
Rule 2: publishing asks ``write_ok`` first, a plain dict keyed by exchange name, so the per-publish
cost is one lookup; a miss goes through ``check``.
"""

from __future__ import annotations

from typing import Protocol

from headrace.server.auth import User
from headrace.server.broker import Broker, VHost, errors

__all__ = ["PERMISSION_CACHE_MAX", "Permissions"]

# Decisions cached per connection: a client touching more distinct names than this (a broker-wide
# sweep) still gets correct answers, only uncached.
PERMISSION_CACHE_MAX = 4096


class Grantee(Protocol):
    """Whose permissions are checked: the connection's ``SessionState`` (state.py, which sits above
    this module and makes its ``Permissions``), once the handshake set its user and vhost."""

    @property
    def broker(self) -> Broker: ...
    @property
    def user(self) -> User | None: ...
    @property
    def vhost(self) -> VHost: ...


class Permissions:
    __slots__ = ("session", "_cache", "write_ok")

    def __init__(self, session: Grantee) -> None:
        self.session = session
        self._cache: dict[tuple[str, str], bool] = {}
        self.write_ok: dict[str, bool] = {}  # exchange -> may publish (read by channels, written here)

    def allowed(self, kind: str, name: str) -> bool:
        """``name`` "" is the default exchange, checked as ``amq.default`` as RabbitMQ does (so
        ``^$`` denies publishing to it too)."""
        key = (kind, name)
        ok = self._cache.get(key)
        if ok is None:
            session = self.session
            assert session.user is not None
            ok = session.broker.users.allowed(session.user.name, session.vhost.name, kind, name or "amq.default")
            if len(self._cache) < PERMISSION_CACHE_MAX:
                self._cache[key] = ok
                if kind == "write":
                    self.write_ok[name] = ok
        return ok

    def check(self, kind: str, name: str, resource: str | None = None) -> None:
        """403 ACCESS_REFUSED unless allowed; ``resource`` defaults to what ``kind`` is usually
        about (write: an exchange, configure/read: a queue), as RabbitMQ words it."""
        if not self.allowed(kind, name):
            session = self.session
            assert session.user is not None
            if resource is None:
                resource = "exchange" if kind == "write" else "queue"
            raise errors.access_refused(
                f"{kind} access to {resource} '{name or 'amq.default'}' in vhost '{session.vhost.name}' "
                f"refused for user '{session.user.name}'")

    def changed(self) -> None:
        self._cache.clear()
        self.write_ok.clear()
