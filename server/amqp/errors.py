"""Protocol faults as the spec names them: a channel exception closes the channel, a connection
exception closes the connection. Each carries the reply code and text sent to the peer and the
class/method that caused it."""

from __future__ import annotations

__all__ = ["AMQPError", "ChannelException", "ConnectionException"]


class AMQPError(Exception):
    def __init__(self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(reply_code, reply_text)
        self.reply_code = int(reply_code)
        self.reply_text = reply_text[:255]  # shortstr on the wire
        self.class_id = class_id
        self.method_id = method_id

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


class ChannelException(AMQPError):
    """Closes one channel; the connection and its other channels go on."""


class ConnectionException(AMQPError):
    """Closes the whole connection."""
