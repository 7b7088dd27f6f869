"""The shovel's client side of AMQP 0-9-1: handshake, and frames split anywhere across reads (the
broker's side is what the server's own codec encodes)."""

from __future__ import annotations

from headrace.server.amqp import methods as m
from headrace.server.amqp.client import ChannelClosed, ClientConnection, Closed, Confirm, Delivery, Ready, Reply
from headrace.server.amqp.codec import encode_content, encode_deliver, encode_method_frame
from headrace.server.amqp.spec import PROTOCOL_HEADER


def handshake(conn: ClientConnection) -> None:
    assert conn.data_to_send() == PROTOCOL_HEADER
    assert conn.receive_data(encode_method_frame(0, m.ConnectionStart())) == []
    start_ok = m.decode_method(conn.data_to_send()[7:-1])
    assert start_ok.response == b"\x00shovel\x00pw" and start_ok.client_properties["connection_name"] == "Shovel s"
    conn.receive_data(encode_method_frame(0, m.ConnectionTune(2047, 4096, 60)))
    out = conn.data_to_send()
    tune_ok = m.decode_method(out[7:7 + 12])
    assert (tune_ok.frame_max, tune_ok.heartbeat) == (4096, 10)  # the smaller of each
    assert conn.receive_data(encode_method_frame(0, m.ConnectionOpenOk())) == []
    assert conn.data_to_send() == encode_method_frame(1, m.ChannelOpen())
    assert conn.receive_data(encode_method_frame(1, m.ChannelOpenOk())) == [Ready()]


def test_handshake_then_deliveries_split_across_reads():
    conn = ClientConnection("shovel", "pw", "/", name="Shovel s")
    handshake(conn)
    body = bytes(range(256)) * 40  # several body frames at frame_max 4096
    wire = (encode_method_frame(1, m.BasicConsumeOk("shovel"))
            + encode_deliver(1, "shovel", 7, True, "x", "k", b"\x80\x00\x02", body, 4096)
            + encode_method_frame(1, m.BasicAck(3, True)) + encode_method_frame(1, m.BasicNack(4, False, True)))
    events = []
    for i in range(0, len(wire), 1000):
        events += conn.receive_data(wire[i:i + 1000])
    assert events == [Reply(1, m.BasicConsumeOk("shovel")), Delivery(7, True, "x", "k", b"\x80\x00\x02", body),
                      Confirm(3, True, True), Confirm(4, False, False)]


def test_publish_splits_the_body_at_frame_max_and_close_is_answered():
    conn = ClientConnection("shovel", "pw", "/", name="Shovel s")
    handshake(conn)
    conn.publish("", "q", b"\x00\x00", b"a" * 10000)
    method = encode_method_frame(1, m.BasicPublish(0, "", "q", False, False))
    assert conn.data_to_send() == method + encode_content(1, 60, b"\x00\x00", b"a" * 10000, 4096)
    assert conn.receive_data(encode_method_frame(1, m.ChannelClose(404, "NOT_FOUND - no queue", 50, 10))) == [
        ChannelClosed(1, 404, "NOT_FOUND - no queue")]
    assert conn.data_to_send() == encode_method_frame(1, m.ChannelCloseOk())
    assert conn.receive_data(encode_method_frame(0, m.ConnectionClose(320, "CONNECTION_FORCED", 0, 0))) == [
        Closed(320, "CONNECTION_FORCED")]
    assert conn.closed and conn.data_to_send() == encode_method_frame(0, m.ConnectionCloseOk())


def test_heartbeats_and_a_silent_peer():
    conn = ClientConnection("shovel", "pw", "/", name="Shovel s")
    handshake(conn)
    assert all(conn.tick() for _ in range(4))  # heard during the handshake, then silent ones
    assert conn.data_to_send().startswith(b"\x08")  # nothing else went: heartbeats
    assert not conn.tick()
    conn.receive_data(b"\x08\x00\x00\x00\x00\x00\x00\xce")
    assert conn.tick()


def test_a_bad_frame_end_closes():
    conn = ClientConnection("shovel", "pw", "/", name="Shovel s")
    assert conn.receive_data(b"\x08\x00\x00\x00\x00\x00\x00\x00") == [Closed(501, "FRAME_ERROR - bad frame end")]
