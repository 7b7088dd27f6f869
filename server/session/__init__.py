"""Per-connection glue between the AMQP protocol core and the broker (synchronous)."""

from .channel import OUTBOX_HIGH_WATER, ChannelSession
from .lifecycle import Lifecycle
from .session import Session

__all__ = ["OUTBOX_HIGH_WATER", "ChannelSession", "Lifecycle", "Session"]
