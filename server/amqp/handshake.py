"""The rules of a connection's handshake, as data and pure functions.

``AMQPConnection`` owns the state (which stage a connection is in, the negotiated limits); this
module says which stages there are, which method each handshake stage accepts and where it leads,
and how a client's connection.tune-ok is checked against the server's limits.
"""

from __future__ import annotations

from enum import Enum

from . import methods as m
from .errors import ConnectionException
from .spec import FRAME_MIN_SIZE, ReplyCode

__all__ = ["EXPECTED", "NEXT", "ConnectionState", "check_mechanism", "negotiate_tune"]


class ConnectionState(Enum):
    AWAIT_HEADER = "await-header"
    AWAIT_START_OK = "await-start-ok"
    AWAIT_TUNE_OK = "await-tune-ok"
    AWAIT_OPEN = "await-open"
    OPEN = "open"
    CLOSING = "closing"  # we sent connection.close and wait for close-ok
    CLOSED = "closed"


# connection-class methods a client may send, by handshake stage, and the stage that follows
EXPECTED: dict[ConnectionState, type[m.Method]] = {
    ConnectionState.AWAIT_START_OK: m.ConnectionStartOk,
    ConnectionState.AWAIT_TUNE_OK: m.ConnectionTuneOk,
    ConnectionState.AWAIT_OPEN: m.ConnectionOpen,
}
NEXT: dict[ConnectionState, ConnectionState] = {
    ConnectionState.AWAIT_START_OK: ConnectionState.AWAIT_TUNE_OK,
    ConnectionState.AWAIT_TUNE_OK: ConnectionState.AWAIT_OPEN,
    ConnectionState.AWAIT_OPEN: ConnectionState.OPEN,
}


def check_mechanism(mechanisms: tuple[str, ...], start_ok: m.ConnectionStartOk) -> None:
    if start_ok.mechanism not in mechanisms:
        raise ConnectionException(ReplyCode.ACCESS_REFUSED,
                                  f"ACCESS_REFUSED - unsupported authentication mechanism {start_ok.mechanism!r}",
                                  start_ok.CLASS_ID, start_ok.METHOD_ID)


def negotiate_tune(frame_max: int, channel_max: int, tune_ok: m.ConnectionTuneOk) -> tuple[int, int, int]:
    """(frame_max, channel_max, heartbeat) from the server's limits (0: none) and the client's
    answer: the client may lower them, not raise them; a frame_max below the spec's minimum or
    above ours is 530."""
    wanted = tune_ok.frame_max or frame_max
    if wanted < FRAME_MIN_SIZE:
        raise ConnectionException(ReplyCode.NOT_ALLOWED,
                                  f"NOT_ALLOWED - frame_max={wanted} < {FRAME_MIN_SIZE} min size",
                                  tune_ok.CLASS_ID, tune_ok.METHOD_ID)
    if frame_max and wanted > frame_max:
        raise ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - frame_max={wanted} > {frame_max} max size",
                                  tune_ok.CLASS_ID, tune_ok.METHOD_ID)
    channels = tune_ok.channel_max or 65535
    return wanted, min(channels, channel_max) if channel_max else channels, tune_ok.heartbeat
