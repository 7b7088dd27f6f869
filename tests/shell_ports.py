"""A stand-in for the I/O shell's side of ``ShellPorts``, for tests that build a ``Broker`` without
the trio shell (imported by module name: ``tests/`` is on the path through its conftest).

It stands in for the shell only, never for a domain part: each port records that it was called,
so a test can assert that the broker woke its clock or released a queue. A test that runs a real
shell part passes that part's method for its port (``shell_ports(wake_flusher=flusher.kick)``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from headrace.queues import Queue
from headrace.server.broker.ports import ShellPorts

__all__ = ["StandInShell", "app_hooks", "no_sender", "no_writer", "shell_ports"]


class StandInShell:
    def __init__(self) -> None:
        self.wakes: Counter[str] = Counter()  # port name -> calls
        self.released: list[Queue] = []  # queues ``saturation_released`` was told of, in order

    def ports(self, **real: Callable[..., Any]) -> ShellPorts:
        """Recording ports, except those given in ``real`` (by ``ShellPorts`` field name)."""
        def wake(name: str) -> Callable[[], None]:
            return lambda: self.wakes.update((name,))

        def released(queue: Queue) -> None:
            self.wakes.update(("saturation_released",))
            self.released.append(queue)

        recording: dict[str, Callable[..., Any]] = {
            name: wake(name) for name in
            ("wake_clock", "wake_flusher", "wake_mirror_writer", "wake_stream_pump", "policies_changed")}
        recording["saturation_released"] = released
        recording["user_deleted"] = lambda name: self.wakes.update(("user_deleted",))
        return ShellPorts(**(recording | real))


def shell_ports(**real: Callable[..., Any]) -> ShellPorts:
    """Ports of a fresh stand-in shell whose calls no one looks at (see ``StandInShell.ports``)."""
    return StandInShell().ports(**real)


def app_hooks(**real: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """``AMQPConnectionHandler``'s calls into the app, for a handler run without one: no definition
    changes to log, nothing counted, no admission to leave, no window to shrink; ``real`` replaces
    any of them by name."""
    async def definitions_synced(ticket: int) -> None:
        return None

    hooks: dict[str, Callable[..., Any]] = {
        "after_batch": lambda: 0, "definitions_synced": definitions_synced, "on_read": lambda nbytes: None,
        "on_header": _unwatched, "on_authenticated": _unwatched, "on_first_hold": _unwatched}
    return hooks | real


def _unwatched() -> None:
    """A notice no part of the test looks at."""


def no_writer() -> None:
    """A ``Session``'s ``wake`` where the test reads the connection's output itself (``data_to_send``)."""


def no_sender() -> None:
    """``Storage``'s ``after_group`` where no connection has output waiting for a store group."""
