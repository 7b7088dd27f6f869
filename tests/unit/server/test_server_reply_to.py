"""The direct reply-to registry and request rewriting (server/broker/reply_to.py), without a socket."""

from __future__ import annotations

import pytest

from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties
from headrace.server.broker.reply_to import REPLY_QUEUE, ReplyRegistry, is_reply_key, rewrite_request


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple] = []

    def deliver_reply(self, consumer_tag: str, exchange: str, routing_key: str, props_raw: bytes,
                      body: bytes) -> None:
        self.got.append((consumer_tag, exchange, routing_key, body))


def test_consume_deliver_cancel():
    registry, sink = ReplyRegistry(), Sink()
    consumer = registry.consume(sink, None, "ctag", no_ack=True)
    assert consumer.address.startswith(REPLY_QUEUE + ".") and registry.exists(consumer.address)
    assert is_reply_key("", consumer.address) and not is_reply_key("amq.direct", consumer.address)
    assert registry.deliver(consumer.address, b"\x00\x00", b"answer")
    assert sink.got == [("ctag", "", consumer.address, b"answer")]
    registry.cancel(consumer)
    assert not registry.exists(consumer.address) and len(registry) == 0
    assert not registry.deliver(consumer.address, b"\x00\x00", b"late")
    assert registry.exists(REPLY_QUEUE)


@pytest.mark.parametrize("no_ack, current, text", [
    (False, None, "PRECONDITION_FAILED - reply consumer cannot acknowledge"),
    (True, "set", "PRECONDITION_FAILED - reply consumer already set"),
])
def test_refusals(no_ack, current, text):
    registry = ReplyRegistry()
    existing = registry.consume(Sink(), None, "first", no_ack=True) if current else None
    with pytest.raises(ChannelException) as info:
        registry.consume(Sink(), existing, "second", no_ack=no_ack)
    assert (info.value.reply_code, info.value.reply_text) == (406, text)


def test_rewrite_request():
    registry = ReplyRegistry()
    consumer = registry.consume(Sink(), None, "t", no_ack=True)
    plain = encode_properties(BasicProperties(correlation_id="c", reply_to="my-queue"))
    assert rewrite_request(plain, consumer) is plain  # another reply_to is left untouched
    none = encode_properties(BasicProperties(content_type="text/plain"))
    assert rewrite_request(none, None) is none
    request = encode_properties(BasicProperties(correlation_id="c", reply_to=REPLY_QUEUE))
    rewritten = decode_properties(rewrite_request(request, consumer))
    assert rewritten.reply_to == consumer.address and rewritten.correlation_id == "c"
    with pytest.raises(ChannelException) as info:
        rewrite_request(request, None)
    assert info.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"
