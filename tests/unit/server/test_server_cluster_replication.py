"""The replication codec (server/cluster/replication.py): every frame, fed whole, one byte at a
time and with the start of the next frame behind it; the protocol errors; the follower's epoch
and gap rules; and a fuzz invariant: any bytes either parse or raise ``ReplicationError``."""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.persistence.records import encode_record
from headrace.server.cluster.replication import (
    HEADER, Ack, Append, Closed, FollowerLog, Gap, Heartbeat, Hello, Refuse, ReplicationConnection,
    ReplicationError, Snapshot, SnapshotDone,
)

FUZZ_EXAMPLES = int(os.environ.get("HEADRACE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize="HEADRACE_FUZZ_EXAMPLES" not in os.environ)

RECORD = encode_record(1, b"a store record's payload")  # what the flusher writes, as it is

# (the receiving side, what the peer sends after its hello)
CASES = {
    "leader hello": ("follower", Hello(3, 0, "hr1@localhost"), []),
    "append of a store record": ("follower", Hello(3, 0, "hr1"), [Append(3, 1, RECORD)]),
    "empty append": ("follower", Hello(3, 0, "hr1"), [Append(3, 1, b"")]),
    "appends and heartbeat": ("follower", Hello(3, 7, "hr1"),
                              [Append(3, 8, b"x" * 70_000), Append(3, 9, b"y"), Heartbeat(3, 9)]),
    "follower hello and acks": ("leader", Hello(2, 41, "hr2@host"), [Ack(3, 42), Ack(3, 43)]),
    "refuse": ("leader", Hello(5, 0, "hr2"), [Refuse(5, "epoch 3 is older than 5")]),
    "unicode name": ("leader", Hello(1, 0, "nœud-é@hôte"), []),
    "a copy, then appends": ("follower", Hello(4, 9, "hr1"),
                             [Snapshot(4, b"file ops" * 1000), Snapshot(4, b""), SnapshotDone(4, 9, 11), Append(4, 10, b"z")]),
}


def peer_of(role: str) -> str:
    return "leader" if role == "follower" else "follower"


def wire(role: str, hello: Hello, frames: list) -> bytes:
    sender = ReplicationConnection(peer_of(role))  # type: ignore[arg-type]
    return b"".join(sender.send(e) for e in [hello, *frames])


@pytest.mark.parametrize("name", CASES)
def test_whole(name: str) -> None:
    role, hello, frames = CASES[name]
    conn = ReplicationConnection(role)  # type: ignore[arg-type]
    assert conn.receive_data(wire(role, hello, frames)) == [hello, *frames]
    assert conn.peer == hello
    assert conn.receive_data(b"") == [Closed()]


@pytest.mark.parametrize("name", CASES)
def test_one_byte_at_a_time(name: str) -> None:
    role, hello, frames = CASES[name]
    conn = ReplicationConnection(role)  # type: ignore[arg-type]
    data = wire(role, hello, frames)
    events = []
    for i in range(len(data)):
        events += conn.receive_data(data[i:i + 1])
    assert events == [hello, *frames]


@pytest.mark.parametrize("name", CASES)
def test_with_trailing_data(name: str) -> None:
    role, hello, frames = CASES[name]
    conn = ReplicationConnection(role)  # type: ignore[arg-type]
    data = wire(role, hello, frames)
    sender = ReplicationConnection(peer_of(role))  # type: ignore[arg-type]
    sender.send(hello)
    extra = sender.send(Heartbeat(9, 1) if role == "follower" else Ack(9, 1))
    assert conn.receive_data(data + extra[:3]) == [hello, *frames]  # the next frame's start waits
    assert conn.receive_data(extra[3:]) == [Heartbeat(9, 1) if role == "follower" else Ack(9, 1)]


def frame(kind: int, body: bytes) -> bytes:
    return HEADER.pack(kind, len(body)) + body


LEADER_HELLO = ReplicationConnection("leader").send(Hello(1, 0, "hr1"))
APPEND_BODY = struct.pack(">QQI", 1, 1, zlib.crc32(b"abc")) + b"abc"

ERRORS = {
    "not hello first": ("follower", frame(3, struct.pack(">QQ", 1, 1)), "expected hello first, got heartbeat"),
    "unknown type": ("follower", frame(9, b""), "unknown frame type 9"),
    "wrong direction": ("follower", frame(4, struct.pack(">QQ", 1, 1)), "a follower does not receive ack"),
    "wrong direction to leader": ("leader", frame(2, APPEND_BODY), "a leader does not receive append"),
    "over the bound": ("follower", HEADER.pack(2, 1 << 31), "over the bound"),
    "second hello": ("follower", LEADER_HELLO * 2, "a second hello"),
    "bad version": ("follower", frame(1, struct.pack(">HQQH", 2, 1, 0, 1) + b"a"), "protocol version 2"),
    "empty name": ("follower", frame(1, struct.pack(">HQQH", 1, 1, 0, 0)), "node name of 0 bytes"),
    "name not utf-8": ("follower", frame(1, struct.pack(">HQQH", 1, 1, 0, 1) + b"\xff"), "not UTF-8"),
    "short append": ("follower", LEADER_HELLO + frame(2, b"\0" * 5), "append of 5 bytes"),
    "bad crc": ("follower", LEADER_HELLO + frame(2, APPEND_BODY[:-1] + b"x"), "CRC mismatch"),
    "long heartbeat": ("follower", LEADER_HELLO + frame(3, b"\0" * 17), "heartbeat of 17 bytes"),
    "refuse length": ("leader", ReplicationConnection("follower").send(Hello(1, 0, "f"))
                      + frame(5, struct.pack(">QH", 1, 9) + b"ab"), "reason of 9 bytes in 12"),
}


@pytest.mark.parametrize("name", ERRORS)
def test_protocol_errors(name: str) -> None:
    role, data, message = ERRORS[name]
    conn = ReplicationConnection(role)  # type: ignore[arg-type]
    with pytest.raises(ReplicationError, match=message):
        conn.receive_data(data)


def test_end_of_stream_inside_a_frame() -> None:
    conn = ReplicationConnection("follower")
    conn.receive_data(LEADER_HELLO[:4])
    with pytest.raises(ReplicationError, match="stream ended inside a frame"):
        conn.receive_data(b"")


def test_sending_rules() -> None:
    leader = ReplicationConnection("leader")
    with pytest.raises(ReplicationError, match="hello first"):
        leader.send(Append(1, 1, b""))
    with pytest.raises(ReplicationError, match="a leader does not send ack"):
        leader.send(Ack(1, 1))
    with pytest.raises(ReplicationError, match="node name of 256 bytes"):
        leader.send(Hello(1, 0, "x" * 256))


def test_follower_refuses_an_older_epoch_and_finds_gaps() -> None:
    log = FollowerLog(epoch=4, position=10)
    assert log.hello(Hello(3, 0, "old")) == Refuse(4, "epoch 3 is older than 4")
    assert log.check(Append(3, 11, b"r")) == Refuse(4, "epoch 3 is older than 4")
    assert log.check(Append(4, 12, b"r")) == Gap(expected=11, got=12)
    assert log.check(Append(4, 10, b"r")) == Gap(expected=11, got=10)
    append = Append(5, 11, b"r")  # a newer leader: its epoch becomes the follower's
    assert log.check(append) is None and log.epoch == 5
    assert log.written(append) == Ack(5, 11) and log.position == 11
    assert log.check(Append(4, 12, b"r")) == Refuse(5, "epoch 4 is older than 5")  # the old leader now
    assert log.heartbeat(Heartbeat(5, 99)) is None and log.committed == 11  # never past what it has
    with pytest.raises(ReplicationError):
        log.written(Append(5, 13, b"r"))


@FUZZ
@given(role=st.sampled_from(["leader", "follower"]), data=st.binary(max_size=200), cut=st.integers(0, 200))
def test_fuzz_any_bytes_parse_or_raise_our_error(role: str, data: bytes, cut: int) -> None:
    conn = ReplicationConnection(role, max_body=1 << 16)  # type: ignore[arg-type]
    try:
        conn.receive_data(data[:cut] or b"\0")
        conn.receive_data(data[cut:] or b"\0")
        conn.receive_data(b"")
    except ReplicationError:
        pass


@FUZZ
@given(hello=st.builds(Hello, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
                       st.text(min_size=1, max_size=60)),
       frames=st.lists(st.one_of(
           st.builds(Append, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(max_size=300)),
           st.builds(Heartbeat, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))), max_size=8),
       cuts=st.lists(st.integers(1, 50), max_size=20))
def test_fuzz_what_is_sent_is_received_whatever_the_cuts(hello: Hello, frames: list, cuts: list) -> None:
    data = wire("follower", hello, frames)
    conn = ReplicationConnection("follower")
    events, at = [], 0
    for n in cuts:
        events += conn.receive_data(data[at:at + n]) if data[at:at + n] else []
        at += n
    if data[at:]:
        events += conn.receive_data(data[at:])
    assert events == [hello, *frames]


def test_a_copy_sets_the_position_the_appends_continue_from() -> None:
    log = FollowerLog(4, 0)
    assert log.snapshot(4) is None
    assert log.snapshot_done(SnapshotDone(4, 9, 11)) is None
    assert log.position == 9
    assert log.check(Append(4, 10, b"")) is None
    assert log.snapshot(3) == Refuse(4, "epoch 3 is older than 4")


def test_a_snapshot_piece_with_a_bad_crc_is_refused() -> None:
    sender = ReplicationConnection("leader")
    data = bytearray(sender.send(Hello(1, 0, "hr1")) + sender.send(Snapshot(1, b"payload")))
    data[-1] ^= 0xFF
    with pytest.raises(ReplicationError, match="CRC"):
        ReplicationConnection("follower").receive_data(bytes(data))
