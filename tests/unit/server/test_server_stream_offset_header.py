"""The offset header spliced into a stream delivery's stored properties: every other property
and header comes through unchanged, whatever the publisher set."""

from __future__ import annotations

import pytest

from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties, with_int_header

CASES = [
    BasicProperties(),
    BasicProperties(delivery_mode=2),
    BasicProperties(content_type="text/plain", content_encoding="gzip", delivery_mode=1, priority=3,
                    correlation_id="c", reply_to="r", expiration="60000", message_id="m", timestamp=1700000000,
                    type="t", user_id="guest", app_id="a"),
    BasicProperties(headers={"a": 1, "b": "two", "nested": {"x": [1, 2]}}, content_type="application/json"),
    BasicProperties(headers={}),
    BasicProperties(headers={"x-stream-offset": 7, "keep": True}),  # replaced, not doubled
]


@pytest.mark.parametrize("props", CASES)
@pytest.mark.parametrize("offset", [0, 12345, 2**40])
def test_offset_header_added_and_nothing_else_changed(props: BasicProperties, offset: int) -> None:
    raw = encode_properties(props)
    got = decode_properties(with_int_header(raw, b"x-stream-offset", offset))
    want_headers = {**(props.headers or {}), "x-stream-offset": offset}
    assert got.headers == want_headers
    assert {k: v for k, v in vars_of(got).items() if k != "headers"} == \
        {k: v for k, v in vars_of(props).items() if k != "headers"}


def test_empty_property_bytes() -> None:
    assert decode_properties(with_int_header(b"", b"x-stream-offset", 5)).headers == {"x-stream-offset": 5}


def vars_of(props: BasicProperties) -> dict[str, object]:
    return {name: getattr(props, name) for name in props.__slots__}  # type: ignore[attr-defined]
