"""Helpers shared by the end-to-end tests (imported by module name: pytest puts this folder on the path)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pika


def unique(prefix: str) -> str:
    """A name no other test uses, so tests can share one broker per module."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(cond: Callable[[], bool], conn: pika.BlockingConnection, timeout: float = 5.0) -> bool:
    """Process the connection's events until ``cond`` holds, for at most ``timeout`` seconds (no fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=0.05)
    return True
