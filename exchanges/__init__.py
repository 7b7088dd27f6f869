"""Pure routing: exchanges and their bindings (no I/O, no clock)."""

from typing import Any

from .base import Destination, Exchange, RouteResult
from .binding import Binding, DestinationKind
from .consistent_hash import HASH_PROPERTIES, ConsistentHashExchange, weight_of
from .direct import DefaultExchange, DirectExchange, FanoutExchange
from .errors import ArgumentError, ExchangeError, OperationNotPermitted, UnknownExchangeType
from .headers import HeadersExchange
from .murmur3 import STREAM_SEED, murmur3_32
from .super_stream import PARTITION_ORDER, SUPER_STREAM, SuperStreamExchange, is_super_stream
from .topic import ROUTE_CACHE_MAX, TopicExchange
from .topic_trie import TopicTrie, split_words

__all__ = [
    "EXCHANGE_TYPES",
    "HASH_PROPERTIES",
    "PARTITION_ORDER",
    "ROUTE_CACHE_MAX",
    "STREAM_SEED",
    "SUPER_STREAM",
    "ArgumentError",
    "Binding",
    "ConsistentHashExchange",
    "DefaultExchange",
    "Destination",
    "DestinationKind",
    "DirectExchange",
    "Exchange",
    "ExchangeError",
    "FanoutExchange",
    "HeadersExchange",
    "OperationNotPermitted",
    "RouteResult",
    "SuperStreamExchange",
    "TopicExchange",
    "TopicTrie",
    "UnknownExchangeType",
    "is_super_stream",
    "make_exchange",
    "murmur3_32",
    "split_words",
    "weight_of",
]

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-consistent-hash": ConsistentHashExchange,
}


def make_exchange(type_: str, name: str, **kw: Any) -> Exchange:
    """An exchange of ``type_``; a direct one declared with ``x-super-stream: true`` routes as a
    super stream (``super_stream.py``) and is still of type ``direct``, as in RabbitMQ."""
    cls = EXCHANGE_TYPES.get(type_)
    if cls is None:
        raise UnknownExchangeType(type_)
    if is_super_stream(kw.get("arguments")):
        if cls is not DirectExchange:
            raise ArgumentError(f"Invalid argument, '{SUPER_STREAM}' is only valid on a direct exchange")
        cls = SuperStreamExchange
    return cls(name, **kw)
