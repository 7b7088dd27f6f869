"""Property-based tests of the sans-IO protocol core: whatever a peer sends, ``receive_data`` never
raises and keeps its invariants (``Watched`` checks them after every call):

- no event after the connection is closed: after our connection.close only the peer's close-ok may
  follow, after a close-ok or the peer's close nothing at all, and the events agree with ``state``;
- the receive buffer never holds more than one partial frame, so it stays below frame_max;
- what we send is whole frames, and every connection.close or channel.close we send or report
  carries a reply code of ``ReplyCode`` with RabbitMQ's "NAME - text" and the ids of a known
  method (or 0/0, or the offending ids for an unknown method); after connection.close we send
  nothing but close-ok;
- every parser either returns a value or raises our protocol error: ``decode_method`` a method or
  ``ConnectionException``, tables and properties ``FrameSyntaxError``; properties that pass the
  header check can be read by everything that reads them later.

``HEADRACE_FUZZ_EXAMPLES`` sets the run size (``make fuzz`` runs a long, random one); the bounded
default in ``make test`` is derandomized so that CI cannot fail by chance.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from amqp_support import HEARTBEAT, accept_opens, frames_of, handshake_bytes, new_conn, open_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection, ConnectionState
from headrace.server.amqp.errors import ChannelException, ConnectionException
from headrace.server.amqp.events import (
    BadProtocolHeader,
    ChannelClosed,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
)
from headrace.server.amqp.properties import (
    BasicProperties,
    check_properties,
    decode_properties,
    encode_properties,
    quick_props,
    replace_headers,
)
from headrace.server.amqp.spec import ReplyCode
from headrace.server.amqp.tables import FrameSyntaxError, decode_table, encode_table

FUZZ_EXAMPLES = int(os.environ.get("HEADRACE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize="HEADRACE_FUZZ_EXAMPLES" not in os.environ)
CODES = {int(code) for code in ReplyCode}


def check_close(code: int, text: str, class_id: int, method_id: int) -> None:
    assert code in CODES and code >= 300, code
    assert text.startswith(f"{ReplyCode(code).name} - "), text
    assert ((class_id, method_id) == (0, 0) or (class_id, method_id) in m.METHODS
            or code in (ReplyCode.COMMAND_INVALID, ReplyCode.UNEXPECTED_FRAME)), (code, class_id, method_id)


class Watched:
    """A connection fed through ``feed``, which asserts the invariants after every call."""

    def __init__(self, **kw: Any) -> None:
        self.conn: AMQPConnection = new_conn(**kw)
        self.phase = "open"  # "closing" once we sent connection.close, "closed" after the last word
        self.sent_close = False

    def feed(self, data: bytes) -> list[Any]:
        events = accept_opens(self.conn, self.conn.receive_data(data))
        self.check(events)
        return events

    def server(self, action: str) -> None:
        """What the broker may do at any time: close the connection or channel 1."""
        if action == "close":
            self.conn.close(reply_code=320, reply_text="CONNECTION_FORCED - broker shutdown")
            if self.phase == "open" and self.conn.state is ConnectionState.CLOSING:
                self.phase = "closing"
        else:
            self.conn.close_channel(1, ChannelException(406, "PRECONDITION_FAILED - fuzz", 60, 40))
        self.check([])

    def check(self, events: list[Any]) -> None:
        conn = self.conn
        for event in events:
            assert self.phase != "closed", f"{event} after the connection closed"
            if self.phase == "closing":
                assert isinstance(event, ConnectionCloseOk), f"{event} after our connection.close"
                self.phase = "closed"
            elif isinstance(event, ConnectionClosed):
                self.phase = "closed" if event.by_peer else "closing"
                if not event.by_peer:
                    check_close(event.reply_code, event.reply_text, 0, 0)
            elif isinstance(event, BadProtocolHeader):
                self.phase = "closed"
            elif isinstance(event, ChannelClosed) and not event.by_peer:
                check_close(event.reply_code, event.reply_text, 0, 0)
            elif isinstance(event, ContentReceived):
                assert len(event.body) == event.body_size
                assert check_properties(event.props_raw) == event.headers
                assert event.headers == decode_properties(event.props_raw).headers
        assert conn.state is {"open": conn.state, "closing": ConnectionState.CLOSING,
                              "closed": ConnectionState.CLOSED}[self.phase]
        if conn.state is ConnectionState.CLOSING:
            assert self.phase == "closing"
        # at most one partial frame is buffered
        assert len(conn._buf) < (8 if conn.state is ConnectionState.AWAIT_HEADER else conn.frame_max)
        out = conn.data_to_send()
        if out == b"AMQP\x00\x00\x09\x01":
            assert self.phase == "closed"  # the answer to a bad protocol header
            return
        for ftype, channel, payload in frames_of(out):
            method = m.decode_method(payload) if ftype == 1 else None
            if self.sent_close:
                assert isinstance(method, m.ConnectionCloseOk) and channel == 0, method
            if isinstance(method, (m.ConnectionClose, m.ChannelClose)):
                check_close(method.reply_code, method.reply_text, method.class_id, method.method_id)
                self.sent_close = self.sent_close or isinstance(method, m.ConnectionClose)


def opened(**kw: Any) -> Watched:
    watched = Watched(**kw)
    watched.feed(handshake_bytes())
    return watched


@FUZZ
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64))
def test_fuzz_any_bytes_after_the_handshake(garbage, chunk):
    watched = opened()
    for i in range(0, len(garbage), chunk):
        watched.feed(garbage[i:i + chunk])


@FUZZ
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=16))
def test_fuzz_any_bytes_from_the_start(data, chunk):
    watched = Watched()
    for i in range(0, len(data), chunk):
        watched.feed(data[i:i + chunk])


SAMPLES = [
    m.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 5}),
    m.BasicPublish(exchange="x", routing_key="k", mandatory=True),
    m.BasicConsume(queue="q", consumer_tag="t", arguments={"x-priority": 3}),
    m.BasicAck(delivery_tag=1, multiple=True),
    m.BasicQos(prefetch_count=10, global_=True),
    m.ExchangeBind(destination="d", source="s", routing_key="r"),
    m.ChannelFlow(active=False),
    m.ConnectionUpdateSecret(b"s", "r"),
]
properties = st.one_of(
    st.binary(max_size=12),
    st.builds(lambda p, cut: encode_properties(p)[:cut],
              st.builds(BasicProperties, content_type=st.none() | st.text(max_size=5),
                        headers=st.none() | st.dictionaries(st.text(max_size=3), st.integers(-(1 << 63), (1 << 63) - 1),
                                                                max_size=2),
                        delivery_mode=st.none() | st.integers(0, 255), expiration=st.none() | st.just("100"),
                        timestamp=st.none() | st.integers(0, 1 << 40)),
              st.integers(0, 40)),
)
channels = st.integers(0, 3)
# A step is bytes a peer sends or something the broker does: structure-aware, so that whole,
# well-formed frames in any order exercise the state machine rather than the framing.
steps = st.one_of(
    st.builds(lambda ch, body: encode_frame(3, ch, body), channels, st.binary(max_size=50)),
    st.builds(lambda ch, payload, cut: encode_frame(1, ch, payload[:cut]), channels,
              st.sampled_from([m.encode_method(x) for x in SAMPLES]), st.integers(0, 60)),
    st.builds(lambda ch: encode_method_frame(ch, m.ChannelOpen()), st.integers(1, 3)),
    st.builds(lambda ch: encode_method_frame(ch, m.ChannelClose(200, "bye")), channels),
    st.builds(lambda ch: encode_method_frame(ch, m.ChannelCloseOk()), channels),
    st.builds(lambda ch, size, props: encode_frame(2, ch, struct.pack(">HHQ", 60, 0, size) + props),
              channels, st.integers(0, 100), properties),
    st.sampled_from([HEARTBEAT, encode_method_frame(0, m.ConnectionClose(200, "bye")),
                     encode_method_frame(0, m.ConnectionCloseOk()), "close", "close-channel"]),
)


@FUZZ
@given(st.lists(steps, max_size=14), st.sampled_from(["whole", "bytewise"]))
def test_fuzz_well_framed_steps_in_any_order(sequence, mode):
    watched = opened(max_message_size=60)
    for step in sequence:
        if isinstance(step, str):
            watched.server(step)
        elif mode == "whole":
            watched.feed(step)
        else:
            for i in range(len(step)):
                watched.feed(step[i:i + 1])


@FUZZ
@given(st.integers(1, 8), st.lists(st.binary(min_size=1, max_size=300), max_size=6))
def test_fuzz_the_buffer_never_holds_more_than_one_partial_frame(cut, chunks):
    """Frames up to the negotiated frame_max (4096), announced sizes beyond it, cut anywhere."""
    watched = Watched(frame_max=4096)
    watched.feed(open_bytes(frame_max=4096) + encode_method_frame(1, m.ChannelOpen()))
    data = b"".join(encode_frame(3, 1, chunk * (4088 // len(chunk))) for chunk in chunks)
    data += struct.pack(">BHI", 3, 1, 5000)  # announced above frame_max: 501 before it is buffered
    for i in range(0, len(data), len(data) // cut + 1):
        watched.feed(data[i:i + len(data) // cut + 1])


# ---------------------------------------------------------------------------- the parsers alone
VALUES = {
    "octet": st.integers(0, 255), "short": st.integers(0, 65535), "long": st.integers(0, (1 << 32) - 1),
    "longlong": st.integers(0, (1 << 64) - 1), "timestamp": st.integers(0, (1 << 64) - 1), "bit": st.booleans(),
    "shortstr": st.text(max_size=20), "longstr": st.binary(max_size=40),
    "table": st.dictionaries(st.text(max_size=8), st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=8),
                                                            st.booleans(), st.binary(max_size=8), st.none()),
                             max_size=4),
}
methods = st.sampled_from(list(m.METHODS.values())).flatmap(
    lambda cls: st.fixed_dictionaries({name: VALUES[kind] for name, kind in cls.FIELDS}).map(lambda kw: cls(**kw)))


@FUZZ
@given(methods)
def test_fuzz_every_method_round_trips(method):
    assert m.decode_method(m.encode_method(method)) == method


@FUZZ
@given(st.one_of(st.binary(max_size=60), methods.map(m.encode_method)), st.binary(max_size=4), st.integers(0, 80))
def test_fuzz_a_method_parse_returns_a_method_or_raises_our_protocol_error(payload, noise, cut):
    payload = (payload[:cut] + noise + payload[cut:]) if noise else payload[:cut]
    try:
        method = m.decode_method(payload)
    except ConnectionException as exc:
        check_close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
        return
    assert m.decode_method(m.encode_method(method)) == method


@FUZZ
@given(st.one_of(st.binary(max_size=60), st.builds(encode_table, VALUES["table"]).map(lambda t: t + b"\x00")),
       st.integers(0, 60))
def test_fuzz_a_table_parse_returns_a_table_or_raises_frame_syntax_error(raw, cut):
    try:
        table, end = decode_table(raw[:cut] if cut < len(raw) else raw, 0)
    except FrameSyntaxError:
        return
    assert isinstance(table, dict) and end <= len(raw)


@FUZZ
@given(properties)
def test_fuzz_properties_that_pass_the_header_check_are_readable_by_everything_later(raw):
    try:
        headers = check_properties(raw)
    except FrameSyntaxError:
        return
    props = decode_properties(raw)
    assert headers == props.headers  # what routing uses instead of decoding them again
    assert quick_props(raw)[:3] == (props.delivery_mode, props.priority, props.expiration)
    assert decode_properties(replace_headers(raw, {"x": 1})).headers == {"x": 1}
