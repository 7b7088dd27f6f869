"""RabbitMQ's reply texts, built in one place so AMQP and HTTP report the same words.

Clients and operators grep for these strings (``NOT_FOUND - no queue 'x' in vhost '/'``), so we keep
RabbitMQ's wording.
"""

from __future__ import annotations

from headrace.server.amqp.errors import ChannelException, ConnectionException
from headrace.server.amqp.spec import ReplyCode

__all__ = [
    "access_refused",
    "command_invalid",
    "in_use",
    "inequivalent",
    "not_found",
    "not_implemented",
    "precondition_failed",
    "resource_locked",
]


def _text(code: ReplyCode, detail: str) -> str:
    return f"{code.name} - {detail}"


def not_found(kind: str, name: str, vhost: str) -> ChannelException:
    return ChannelException(ReplyCode.NOT_FOUND, _text(ReplyCode.NOT_FOUND, f"no {kind} '{name}' in vhost '{vhost}'"))


def access_refused(detail: str) -> ChannelException:
    return ChannelException(ReplyCode.ACCESS_REFUSED, _text(ReplyCode.ACCESS_REFUSED, detail))


def precondition_failed(detail: str) -> ChannelException:
    return ChannelException(ReplyCode.PRECONDITION_FAILED, _text(ReplyCode.PRECONDITION_FAILED, detail))


def resource_locked(queue: str, vhost: str) -> ChannelException:
    return ChannelException(
        ReplyCode.RESOURCE_LOCKED,
        _text(
            ReplyCode.RESOURCE_LOCKED,
            f"cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be "
            "originally declared on another connection or the exclusive property value does not match "
            "that of the original declaration.",
        ),
    )


def inequivalent(arg: str, kind: str, name: str, vhost: str, received: object, current: object) -> ChannelException:
    return precondition_failed(
        f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
        f"received {_show(received)} but current is {_show(current)}"
    )


def in_use(kind: str, name: str, vhost: str) -> ChannelException:
    return precondition_failed(f"{kind} '{name}' in vhost '{vhost}' in use")


def command_invalid(detail: str) -> ConnectionException:
    return ConnectionException(ReplyCode.COMMAND_INVALID, _text(ReplyCode.COMMAND_INVALID, detail))


def not_implemented(detail: str) -> ConnectionException:
    return ConnectionException(ReplyCode.NOT_IMPLEMENTED, _text(ReplyCode.NOT_IMPLEMENTED, detail))


def _show(value: object) -> str:
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"'{value}'"
    return f"'{value}'"
