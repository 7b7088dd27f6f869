"""UserRegistry: cached successful logins, the failed-login throttle and change notification."""

from __future__ import annotations

import pytest

from headrace.server import auth
from headrace.server.auth import LoginThrottled, Permission, UserRegistry, hash_password


class Clock:
    """An injected clock: tests move time by assignment, never by sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fast_hash(password: str) -> str:
    return hash_password(password, iterations=1000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def notices() -> list[str]:
    """What the registry told its owner (the broker's part), in order."""
    return []


@pytest.fixture
def registry(clock: Clock, notices: list[str]) -> UserRegistry:
    reg = UserRegistry(clock=clock, failed_per_second=2.0, failed_burst=3.0,
                       on_change=lambda: notices.append("change"),
                       on_user_deleted=lambda name: notices.append(f"deleted {name}"),
                       on_definition=lambda section, key, deleted: None)
    reg.add_user("alice", None, password_hash=fast_hash("right"))
    return reg


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = auth.verify_password

    def counting(password: str, password_hash: str) -> bool:
        calls[0] += 1
        return real(password, password_hash)

    monkeypatch.setattr(auth, "verify_password", counting)
    return calls


def test_successful_login_is_cached_and_not_hashed_again(registry: UserRegistry,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_hashes(monkeypatch)
    assert registry.check("alice", "right") is not None
    assert registry.check("alice", "right") is not None
    assert registry.check("alice", "right") is not None
    assert calls[0] == 1


def test_password_change_and_deletion_invalidate_the_cache(registry: UserRegistry,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.check("alice", "right") is not None
    registry.add_user("alice", None, password_hash=fast_hash("new"))
    assert registry.check("alice", "right") is None
    assert registry.check("alice", "new") is not None
    registry.delete_user("alice")
    assert registry.check("alice", "new") is None


def test_failed_logins_beyond_the_burst_are_refused_without_hashing(
        registry: UserRegistry, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_hashes(monkeypatch)
    for _ in range(3):  # the burst
        assert registry.check("alice", "wrong") is None
    assert calls[0] == 3
    with pytest.raises(LoginThrottled) as info:
        registry.check("alice", "wrong")
    assert calls[0] == 3  # refused at once: no hash
    assert info.value.retry_after == pytest.approx(0.5)  # one token at 2/s
    # even the right password needs a hash it cannot have now
    with pytest.raises(LoginThrottled):
        registry.check("alice", "right")
    # unknown users cost a (dummy) hash too, so they are throttled the same way
    with pytest.raises(LoginThrottled):
        registry.check("mallory", "x")
    assert registry.authenticate("alice", "right") is None  # the non-raising form says "refused"
    assert registry.throttled == 4
    clock.now += 0.5  # one token back
    assert registry.check("alice", "right") is not None
    assert calls[0] == 4


def test_cached_logins_pass_while_throttled(registry: UserRegistry, clock: Clock) -> None:
    assert registry.check("alice", "right") is not None
    for _ in range(3):
        registry.check("bob", "guess")
    with pytest.raises(LoginThrottled):
        registry.check("bob", "guess")
    assert registry.check("alice", "right") is not None


def test_bucket_refills_at_the_rate_up_to_the_burst(registry: UserRegistry, clock: Clock) -> None:
    for _ in range(3):
        registry.check("alice", "wrong")
    clock.now += 3600  # a long quiet spell gives back the burst, not more
    for _ in range(3):
        assert registry.check("alice", "wrong") is None
    with pytest.raises(LoginThrottled):
        registry.check("alice", "wrong")
    clock.now -= 10  # a clock going backwards never mints tokens
    with pytest.raises(LoginThrottled):
        registry.check("alice", "wrong")


def test_every_change_bumps_the_generation_and_notifies(registry: UserRegistry, notices: list[str]) -> None:
    seen = notices
    seen.clear()  # the fixture's own add_user
    start = registry.generation
    registry.set_permission("alice", "/", Permission())
    registry.set_permission("alice", "/", Permission(write="^$"))
    assert registry.clear_permission("alice", "/")
    assert not registry.clear_permission("alice", "/")  # nothing changed
    registry.add_user("bob", None, password_hash=fast_hash("b"))
    assert registry.delete_user("bob")
    assert not registry.delete_user("bob")
    assert registry.generation == start + 5
    assert seen == ["change"] * 5 + ["deleted bob"]
