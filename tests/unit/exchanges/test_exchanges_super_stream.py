"""MurmurHash3 x86_32 against published vectors, and the super stream exchange's routing rule."""

from __future__ import annotations

import pytest

from headrace.exchanges import (
    STREAM_SEED,
    ArgumentError,
    Binding,
    DestinationKind,
    DirectExchange,
    SuperStreamExchange,
    make_exchange,
    murmur3_32,
)

Q = DestinationKind.QUEUE


@pytest.mark.parametrize("data, seed, expected", [
    # the reference implementation's vectors (as collected on Wikipedia's MurmurHash page)
    (b"", 0, 0),
    (b"", 1, 0x514E28B7),
    (b"", 0xFFFFFFFF, 0x81F16F39),
    (b"\xff\xff\xff\xff", 0, 0x76293B50),
    (b"!Ce\x87", 0, 0xF55B516B),
    (b"!Ce\x87", 0x5082EDEE, 0x2362F9DE),
    (b"!Ce", 0, 0x7E4A8634),
    (b"!C", 0, 0xA0F7B07A),
    (b"!", 0, 0x72661CF4),
    (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
    # rabbitmq-stream-java-client's HashUtilsTest: the stream clients' seed, and 42
    (b"hello", STREAM_SEED, 1321743225),
    (b"brave", STREAM_SEED, 3825276426),
    (b"new", STREAM_SEED, 2970740106),
    (b"world", STREAM_SEED, 2453398188),
    (b"hello", 42, 3806057185),
    (b"brave", 42, 619588758),
    (b"new", 42, 1483300585),
    (b"world", 42, 1145629360),
])
def test_murmur3_vectors(data, seed, expected):
    assert murmur3_32(data, seed) == expected


def super_stream(partitions: int, name: str = "invoices") -> SuperStreamExchange:
    ex = make_exchange("direct", name, durable=True, arguments={"x-super-stream": True})
    assert isinstance(ex, SuperStreamExchange) and ex.TYPE == "direct"
    for i in range(partitions):
        ex.bind(Binding.make(name, f"{name}-{i}", Q, str(i), {"x-stream-partition-order": i}))
    return ex


def route(ex, key: str) -> tuple[str, ...]:
    return ex.route(key, None, lambda name: None).queues


def test_routes_as_the_java_clients_hash_strategy():
    # HashRoutingStrategyTest: keys hello1..hello10 over invoices-01..03
    expected = ["02", "01", "02", "03", "01", "03", "01", "02", "01", "03"]
    ex = make_exchange("direct", "inv", arguments={"x-super-stream": True})
    for i, suffix in enumerate(("01", "02", "03")):
        ex.bind(Binding.make("inv", f"invoices-{suffix}", Q, str(i), {"x-stream-partition-order": i}))
    assert [route(ex, f"hello{i}") for i in range(1, 11)] == [(f"invoices-{s}",) for s in expected]


def test_binding_keys_route_directly_and_the_rest_by_hash():
    ex = super_stream(4)
    assert [route(ex, str(i)) for i in range(4)] == [(f"invoices-{i}",) for i in range(4)]
    for key in (f"customer-{i}" for i in range(200)):
        assert route(ex, key) == (f"invoices-{murmur3_32(key.encode(), STREAM_SEED) % 4}",)
        assert route(ex, key) == route(ex, key)  # cached answer, same partition


def test_partition_order_not_binding_order_decides():
    ex = make_exchange("direct", "s", arguments={"x-super-stream": True})
    for i in (2, 0, 1):
        ex.bind(Binding.make("s", f"s-{i}", Q, str(i), {"x-stream-partition-order": i}))
    assert [d for _, d in ex.partitions()] == ["s-0", "s-1", "s-2"]
    key = "customer-7"
    assert route(ex, key) == (f"s-{murmur3_32(key.encode(), STREAM_SEED) % 3}",)


def test_unbinding_a_partition_changes_the_count_and_clears_the_cache():
    ex = super_stream(3)
    keys = [f"k{i}" for i in range(100)]
    before = {k: route(ex, k) for k in keys}
    ex.unbind(Binding.make("invoices", "invoices-2", Q, "2", {"x-stream-partition-order": 2}))
    after = {k: route(ex, k) for k in keys}
    assert all(after[k] == (f"invoices-{murmur3_32(k.encode(), STREAM_SEED) % 2}",) for k in keys)
    assert before != after


def test_no_partition_routes_nowhere_and_plain_direct_is_untouched():
    ex = make_exchange("direct", "empty", arguments={"x-super-stream": True})
    assert route(ex, "anything") == ()
    plain = make_exchange("direct", "plain", arguments={"x-super-stream": False})
    assert type(plain) is DirectExchange


@pytest.mark.parametrize("args", [
    {"x-stream-partition-order": -1},
    {"x-stream-partition-order": "one"},
    {"x-stream-partition-order": True},
])
def test_bad_partition_order_is_refused(args):
    ex = super_stream(1)
    with pytest.raises(ArgumentError) as info:
        ex.bind(Binding.make("invoices", "other", Q, "9", args))
    assert "'x-stream-partition-order' must be a non-negative integer" in str(info.value)


def test_a_taken_partition_order_is_refused():
    ex = super_stream(2)
    with pytest.raises(ArgumentError) as info:
        ex.bind(Binding.make("invoices", "other", Q, "2", {"x-stream-partition-order": 1}))
    assert str(info.value) == "Invalid argument, 'x-stream-partition-order' 1 is already that of partition 'invoices-1'"


def test_super_stream_on_another_type_is_refused():
    with pytest.raises(ArgumentError) as info:
        make_exchange("fanout", "f", arguments={"x-super-stream": True})
    assert str(info.value) == "Invalid argument, 'x-super-stream' is only valid on a direct exchange"
