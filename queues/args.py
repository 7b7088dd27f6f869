"""Queue arguments (``x-*``) validated once at declare time into a frozen ``QueueArgs``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Overflow", "QueueArgs", "QueueArgumentError"]


class Overflow(Enum):
    DROP_HEAD = "drop-head"
    REJECT_PUBLISH = "reject-publish"
    REJECT_PUBLISH_DLX = "reject-publish-dlx"


class QueueArgumentError(ValueError):
    pass


QUEUE_MODES = ("default", "lazy")  # RabbitMQ's x-queue-mode values
# RabbitMQ 4.3's x-delayed-retry-type values: which returns of a quorum queue wait before they are
# ready again (failed: those that counted a failure; returned: those that did not)
DELAYED_RETRY_TYPES = ("disabled", "all", "failed", "returned")


def _int(args: Mapping[str, Any], key: str, queue: str, *, minimum: int, maximum: int | None = None) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueueArgumentError(f"invalid arg '{key}' for queue '{queue}': {value!r} is not an integer")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise QueueArgumentError(f"invalid arg '{key}' for queue '{queue}': {value} must be {bound}")
    return value


def _str(args: Mapping[str, Any], key: str, queue: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise QueueArgumentError(f"invalid arg '{key}' for queue '{queue}': {value!r} is not a string")
    return value


@dataclass(frozen=True, slots=True)
class QueueArgs:
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    delivery_limit: int | None = None
    no_delivery_limit: bool = False  # x-delivery-limit -1: no limit, not even a quorum queue's default
    consumer_timeout_ms: int | None = None  # x-consumer-timeout (read where the release follows it)
    delayed_retry: str = "disabled"  # x-delayed-retry-type
    delayed_retry_min_ms: int = 0
    delayed_retry_max_ms: int | None = None

    def exceeded_by(self, count: int, size: int) -> bool:
        """Whether ``count`` ready messages of ``size`` body bytes pass x-max-length(-bytes)."""
        if self.max_length is not None and count > self.max_length:
            return True
        return self.max_length_bytes is not None and size > self.max_length_bytes

    @classmethod
    def parse(cls, arguments: Mapping[str, Any] | None, queue_name: str = "") -> QueueArgs:
        if not arguments:
            return NO_ARGS  # frozen, so every queue without arguments shares one
        args = arguments
        overflow_s = _str(args, "x-overflow", queue_name)
        try:
            overflow = Overflow(overflow_s) if overflow_s is not None else Overflow.DROP_HEAD
        except ValueError:
            raise QueueArgumentError(f"invalid arg 'x-overflow' for queue '{queue_name}': {overflow_s!r} "
                                     "(expected drop-head, reject-publish or reject-publish-dlx)") from None
        mode = _str(args, "x-queue-mode", queue_name)
        if mode is not None and mode not in QUEUE_MODES:
            # accepted and ignored when valid (every classic queue pages to disk here), refused
            # otherwise, as RabbitMQ 3.10 refuses an unknown mode
            raise QueueArgumentError(f"invalid arg 'x-queue-mode' for queue '{queue_name}': {mode!r} "
                                     "(expected default or lazy)")
        sac = args.get("x-single-active-consumer", False)
        if not isinstance(sac, bool):
            raise QueueArgumentError(f"invalid arg 'x-single-active-consumer' for queue '{queue_name}': "
                                     f"{sac!r} is not a boolean")
        dlrk = _str(args, "x-dead-letter-routing-key", queue_name)
        dlx = _str(args, "x-dead-letter-exchange", queue_name)
        if dlrk is not None and dlx is None:
            raise QueueArgumentError(f"invalid arg 'x-dead-letter-routing-key' for queue '{queue_name}': "
                                     "x-dead-letter-exchange is not set")
        limit = _int(args, "x-delivery-limit", queue_name, minimum=-1)
        retry = _str(args, "x-delayed-retry-type", queue_name) or "disabled"
        if retry not in DELAYED_RETRY_TYPES:
            raise QueueArgumentError(f"invalid arg 'x-delayed-retry-type' for queue '{queue_name}': {retry!r} "
                                     "(expected disabled, all, failed or returned)")
        retry_min = _int(args, "x-delayed-retry-min", queue_name, minimum=0, maximum=2**32 - 1)
        retry_max = _int(args, "x-delayed-retry-max", queue_name, minimum=0, maximum=2**32 - 1)
        if retry != "disabled" and not retry_min:
            raise QueueArgumentError(f"invalid arg 'x-delayed-retry-type' for queue '{queue_name}': "
                                     "x-delayed-retry-min must be set to a delay above 0 ms")
        return cls(
            message_ttl_ms=_int(args, "x-message-ttl", queue_name, minimum=0, maximum=2**32 - 1),
            expires_ms=_int(args, "x-expires", queue_name, minimum=1, maximum=2**32 - 1),
            max_length=_int(args, "x-max-length", queue_name, minimum=0),
            max_length_bytes=_int(args, "x-max-length-bytes", queue_name, minimum=0),
            overflow=overflow,
            dead_letter_exchange=dlx,
            dead_letter_routing_key=dlrk,
            max_priority=_int(args, "x-max-priority", queue_name, minimum=1, maximum=255),
            single_active_consumer=sac,
            delivery_limit=limit if limit != -1 else None,
            no_delivery_limit=limit == -1,
            consumer_timeout_ms=_int(args, "x-consumer-timeout", queue_name, minimum=1, maximum=2**32 - 1),
            delayed_retry=retry,
            delayed_retry_min_ms=retry_min or 0,
            delayed_retry_max_ms=retry_max,
        )


NO_ARGS = QueueArgs()  # what ``parse`` gives for no arguments at all
