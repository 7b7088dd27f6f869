"""Pure routing: exchanges and their bindings (no I/O, no clock)."""

from typing import Any

from .base import Destination, Exchange, RouteResult
from .binding import Binding, DestinationKind
from .consistent_hash import HASH_PROPERTIES, ConsistentHashExchange, weight_of
from .direct import DefaultExchange, DirectExchange, FanoutExchange
from .errors import ArgumentError, ExchangeError, OperationNotPermitted, UnknownExchangeType
from .headers import HeadersExchange
from .topic import ROUTE_CACHE_MAX, TopicExchange
from .topic_trie import TopicTrie, split_words

__all__ = [
    "EXCHANGE_TYPES",
    "HASH_PROPERTIES",
    "ROUTE_CACHE_MAX",
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
    "TopicExchange",
    "TopicTrie",
    "UnknownExchangeType",
    "make_exchange",
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
    cls = EXCHANGE_TYPES.get(type_)
    if cls is None:
        raise UnknownExchangeType(type_)
    return cls(name, **kw)
