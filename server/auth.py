"""Users, password hashes and per-vhost permissions (RabbitMQ's model).

Rule 1: the ``Broker`` owns one ``UserRegistry``; AMQP sessions and the HTTP API only call it.
Rule 2: passwords are never kept in plain text, on disk or in memory: PBKDF2-SHA256 with a random
salt (standard library, slow on purpose). A successful check is remembered as an HMAC of the
password under a per-process key, so a client that reconnects in a loop does not cost one slow hash
per connection, and a wrong password still pays the full price.
Rule 3: slow hashes run on the event loop, so failed ones are rationed: a token bucket
(``FAILED_LOGINS_PER_SECOND``, burst ``FAILED_LOGINS_BURST``) of verifications that failed. While
it is empty every login that would need a hash is refused at once (``LoginThrottled``); cached
successes still pass, so clients that already logged in keep reconnecting during a guessing attack.
Rule 4: every change to users or permissions bumps ``generation`` and calls ``on_change`` (the
broker drops its connections' permission caches there) and ``on_user_deleted``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "HASH_ALGORITHM",
    "LoginThrottled",
    "Permission",
    "TopicPermission",
    "User",
    "UserRegistry",
    "hash_password",
    "verify_password",
]

HASH_ALGORITHM = "pbkdf2_sha256"
# OWASP's 2023 figure is 600k for PBKDF2-SHA256; a broker authenticates far more often than a web
# login and caches successes, so we take a lower cost that still makes offline guessing slow.
PBKDF2_ITERATIONS = 120_000
SALT_BYTES = 16
KNOWN_TAGS = frozenset({"administrator", "management", "monitoring", "policymaker", "impersonator"})
_CACHE_KEY = os.urandom(32)
# successful (user, password) checks remembered; bounded so a user churn cannot grow it forever
VERIFIED_CACHE_MAX = 1024
# failed slow verifications allowed per second (~50 ms of CPU each), and the burst above that rate
FAILED_LOGINS_PER_SECOND = 10.0
FAILED_LOGINS_BURST = 20.0


class LoginThrottled(Exception):
    """Too many failed logins lately: refused without hashing. AMQP answers 403 ACCESS_REFUSED,
    HTTP should answer 429 with ``Retry-After: retry_after`` (whole seconds, rounded up)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__("too many failed logins, try later")
        self.retry_after = retry_after


def hash_password(password: str, *, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    b64 = base64.b64encode
    return f"{HASH_ALGORITHM}${iterations}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, password_hash: str) -> bool:
    try:
        algorithm, iterations_s, salt_b64, digest_b64 = password_hash.split("$")
        if algorithm != HASH_ALGORITHM:
            return False
        salt = base64.b64decode(salt_b64)
        expected = base64.b64decode(digest_b64)
        iterations = int(iterations_s)
    except ValueError:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return hmac.compare_digest(digest, expected)


@dataclass(slots=True)
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    @property
    def can_monitor(self) -> bool:
        return bool({"administrator", "monitoring"} & set(self.tags))

    @property
    def can_manage(self) -> bool:
        return bool({"administrator", "management", "monitoring", "policymaker"} & set(self.tags))


@dataclass(slots=True)
class Permission:
    """configure / write / read regular expressions, searched (unanchored) in resource names as
    RabbitMQ does; ``""`` and ``"^$"`` therefore deny every named resource."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    _compiled: tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self._compiled = (re.compile(self.configure), re.compile(self.write), re.compile(self.read))
        except re.error as exc:
            raise ValueError(f"invalid permission regular expression: {exc}") from exc

    def allows(self, kind: str, name: str) -> bool:
        """``kind`` is configure, write or read. An empty pattern denies everything."""
        pattern = self._compiled[("configure", "write", "read").index(kind)]
        if not pattern.pattern:
            return False
        return pattern.search(name) is not None


@dataclass(slots=True)
class TopicPermission:
    """RabbitMQ's topic authorisation: write/read patterns on routing keys of one topic exchange,
    searched as the vhost permissions are. ``{username}`` and ``{vhost}`` in a pattern stand for the
    connection's user and vhost (escaped), so ``^{username}\\.`` gives each user a key prefix."""

    exchange: str
    write: str = ".*"
    read: str = ".*"

    def __post_init__(self) -> None:
        for pattern in (self.write, self.read):
            try:
                re.compile(pattern.replace("{username}", "u").replace("{vhost}", "v"))
            except re.error as exc:
                raise ValueError(f"invalid topic permission regular expression: {exc}") from exc

    def allows(self, kind: str, routing_key: str, user: str, vhost: str) -> bool:
        pattern = (self.write if kind == "write" else self.read)
        if not pattern:
            return False
        pattern = pattern.replace("{username}", re.escape(user)).replace("{vhost}", re.escape(vhost))
        return re.search(pattern, routing_key) is not None


class UserRegistry:
    def __init__(self, *, on_change: Callable[[], None], on_user_deleted: Callable[[str], None],
                 on_definition: Callable[[str, tuple[str, ...], bool], None],
                 clock: Callable[[], float] = time.monotonic,
                 failed_per_second: float = FAILED_LOGINS_PER_SECOND,
                 failed_burst: float = FAILED_LOGINS_BURST) -> None:
        self.users: dict[str, User] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}  # (user, vhost)
        self.topic_permissions: dict[tuple[str, str, str], TopicPermission] = {}  # (user, vhost, exchange)
        self._verified: dict[str, bytes] = {}
        self.generation = 0  # bumped on every user/permission change
        # the broker's, given by it at construction: cached permission decisions are dropped, a
        # deleted user's connections closed, and (section, key, deleted) a durable user or
        # permission change logged
        self.on_change = on_change
        self.on_user_deleted = on_user_deleted
        self.on_definition = on_definition
        self._clock = clock
        self._fail_rate = failed_per_second
        self._fail_burst = failed_burst
        self._fail_tokens = failed_burst
        self._fail_at = clock()
        self.throttled = 0  # logins refused by the throttle (for stats)

    def changed(self) -> None:
        """Users or permissions changed: cached permission decisions anywhere are stale."""
        self.generation += 1
        self.on_change()

    def add_user(self, name: str, password: str | None, tags: Iterable[str] = (), *,
                 password_hash: str | None = None) -> User:
        if not name:
            raise ValueError("user name must not be empty")
        unknown = set(tags) - KNOWN_TAGS
        if unknown:
            raise ValueError(f"unknown user tag(s): {', '.join(sorted(unknown))}")
        if password_hash is None:
            password_hash = hash_password(password or "") if password else ""
        user = User(name, password_hash, tuple(tags))
        self.users[name] = user
        self._verified.pop(name, None)
        self.changed()
        self.on_definition("users", (name,), False)
        return user

    def delete_user(self, name: str) -> bool:
        self._verified.pop(name, None)
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        for topic_key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[topic_key]
        existed = self.users.pop(name, None) is not None
        if existed:
            self.changed()
            self.on_definition("users", (name,), True)  # with the permissions it had
            self.on_user_deleted(name)
        return existed

    def authenticate(self, name: str, password: str) -> User | None:
        """``check`` for callers that only tell "refused": a throttled login is ``None``."""
        try:
            return self.check(name, password)
        except LoginThrottled:
            return None

    def check(self, name: str, password: str) -> User | None:
        """The user if the password is right, else ``None``; raises ``LoginThrottled`` instead of
        hashing while failed verifications are over their rate."""
        user = self.users.get(name)
        token = b""
        if user is not None and user.password_hash:
            token = hmac.new(_CACHE_KEY, f"{name}\0{password}\0{user.password_hash}".encode(), "sha256").digest()
            cached = self._verified.get(name)
            if cached is not None and hmac.compare_digest(cached, token):
                return user
        self._refill()
        if self._fail_tokens < 1:
            self.throttled += 1
            raise LoginThrottled((1 - self._fail_tokens) / self._fail_rate)
        if user is None or not user.password_hash:
            # run a hash anyway, so a probe cannot tell unknown users from wrong passwords by timing
            verify_password(password, _DUMMY_HASH)
            self._fail_tokens -= 1
            return None
        if not verify_password(password, user.password_hash):
            self._fail_tokens -= 1
            return None
        if len(self._verified) >= VERIFIED_CACHE_MAX:
            self._verified.clear()
        self._verified[name] = token
        return user

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._fail_at)
        self._fail_at = now
        self._fail_tokens = min(self._fail_burst, self._fail_tokens + elapsed * self._fail_rate)

    def set_permission(self, user: str, vhost: str, permission: Permission) -> None:
        if user not in self.users:
            raise KeyError(user)
        self.permissions[(user, vhost)] = permission
        self.changed()
        self.on_definition("permissions", (user, vhost), False)

    def clear_permission(self, user: str, vhost: str) -> bool:
        existed = self.permissions.pop((user, vhost), None) is not None
        if existed:
            self.changed()
            self.on_definition("permissions", (user, vhost), False)
        return existed

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def allowed(self, user: str, vhost: str, kind: str, name: str) -> bool:
        perm = self.permissions.get((user, vhost))
        return perm is not None and perm.allows(kind, name)

    def set_topic_permission(self, user: str, vhost: str, permission: TopicPermission) -> bool:
        """True if the user had topic permissions on that exchange already."""
        if user not in self.users:
            raise KeyError(user)
        key = (user, vhost, permission.exchange)
        existed = key in self.topic_permissions
        self.topic_permissions[key] = permission
        self.changed()
        self.on_definition("topic_permissions", key, False)
        return existed

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """One exchange's topic permissions, or all of the user's in the vhost; True if any went."""
        keys = [k for k in self.topic_permissions
                if k[0] == user and k[1] == vhost and (exchange is None or k[2] == exchange)]
        for key in keys:
            del self.topic_permissions[key]
            self.on_definition("topic_permissions", key, False)
        if keys:
            self.changed()
        return bool(keys)

    def topic_permission(self, user: str, vhost: str, exchange: str) -> TopicPermission | None:
        """The rule on routing keys of that exchange, or None: no rule means no restriction, as in
        RabbitMQ (topic authorisation applies only where topic permissions are set)."""
        if not self.topic_permissions:
            return None
        return self.topic_permissions.get((user, vhost, exchange))


_DUMMY_HASH = hash_password("headrace-dummy", salt=b"\0" * SALT_BYTES)
