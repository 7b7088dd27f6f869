"""A message's filter value is read from its stored properties, and a consumer's filter arguments
become the filter its cursor keeps, or a 406 when they are not strings / a boolean."""

from __future__ import annotations

import pytest

from headrace.persistence.stream_filter import StreamFilter
from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker.stream_filtering import consumer_filter, filter_value


def props(**headers: object) -> bytes:
    return encode_properties(BasicProperties(content_type="text/plain", headers=headers or None))


def test_filter_value_of_stored_properties():
    assert filter_value(props(**{"x-stream-filter-value": "eu"})) == b"eu"
    assert filter_value(props(**{"x-stream-filter-value": "é"})) == "é".encode()
    assert filter_value(props(other="x")) is None
    assert filter_value(props()) is None
    assert filter_value(b"") is None
    assert filter_value(props(**{"x-stream-filter-value": 5})) is None  # not a string: unfiltered
    assert filter_value(props(**{"x-stream-filter-value": b"raw"})) is None  # a byte array is not a string


def test_filter_value_walk_agrees_with_the_decoder():
    """The walk over the header keys skips every value type the codec writes, before and after."""
    import datetime
    from decimal import Decimal

    others = {"a": 1, "big": 2**40, "f": 1.5, "t": True, "n": None, "s": "x-stream-filter-value",
              "tab": {"x-stream-filter-value": "inner"}, "arr": ["x", 2], "dec": Decimal("1.25"),
              "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), "raw": b"\x15x-stream-filter-value"}
    for before in (True, False):
        headers = {**others, "x-stream-filter-value": "eu"} if not before else {"x-stream-filter-value": "eu", **others}
        for content_type in (None, "text/plain"):
            raw = encode_properties(BasicProperties(content_type=content_type, content_encoding="gzip",
                                                    headers=headers, message_id="m"))
            assert filter_value(raw) == b"eu"
    assert filter_value(encode_properties(BasicProperties(headers=others))) is None


def test_consumer_filter_arguments():
    assert consumer_filter({}, "s") is None
    assert consumer_filter({"x-stream-match-unfiltered": True}, "s") is None
    assert consumer_filter({"x-stream-filter": "a"}, "s") == StreamFilter(frozenset({b"a"}), False)
    assert consumer_filter({"x-stream-filter": [b"a", "b"], "x-stream-match-unfiltered": True}, "s") == \
        StreamFilter(frozenset({b"a", b"b"}), True)
    for bad in ({"x-stream-filter": 1}, {"x-stream-filter": []}, {"x-stream-filter": ["a", None]},
                {"x-stream-filter": "a", "x-stream-match-unfiltered": 1}):
        with pytest.raises(ChannelException) as info:
            consumer_filter(bad, "queue 's' in vhost '/'")
        assert info.value.reply_code == 406


def test_exact_check():
    wanted = StreamFilter(frozenset({b"a"}), False)
    assert wanted.matches(b"a") and not wanted.matches(b"b") and not wanted.matches(None)
    assert StreamFilter(frozenset({b"a"}), True).matches(None)
