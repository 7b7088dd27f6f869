"""Python's floor for one message through an AMQP broker: the least any broker written in Python
must do per message, timed in one process with no sockets, no event loop and no bookkeeping.

    .venv/bin/python benchmarks/bench_floor.py [--messages 200000] [--rounds 5]

Per message: cut the three publish frames (basic.publish, content header, body) out of a read's
bytes and check their frame ends; take the exchange and routing key out of the method; route the
key through a dict to a queue; append to and pop from that queue (a deque); encode the three
deliver frames (basic.deliver with consumer tag, delivery tag, exchange and key, the header with
the publisher's property bytes, the body); cut the consumer's basic.ack and read its tag. Written
with ``struct`` and bytes slicing only, none of headrace's code: it is the yardstick
``bench_ceiling.py`` divides its broker CPU per message by, so the ratio means the same on any
machine. Messages are 64-byte bodies to the default exchange, one queue, one consumer.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
from collections import deque

FRAME_END = 0xCE
HEADER = struct.Struct(">BHI")  # type, channel, payload size
METHOD_IDS = struct.Struct(">HH")
CONTENT_HEADER = struct.Struct(">HHQ")  # class, weight, body size
U64 = struct.Struct(">Q")


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, channel, len(payload)) + payload + bytes((FRAME_END,))


def _shortstr(s: bytes) -> bytes:
    return bytes((len(s),)) + s


def publish_bytes(count: int, body: bytes, routing_key: bytes) -> bytes:
    """What a pipelining publisher's socket reads for ``count`` publishes on channel 1."""
    method = _frame(1, 1, METHOD_IDS.pack(60, 40) + b"\x00\x00" + _shortstr(b"") + _shortstr(routing_key)
                    + b"\x00")
    props = b"\x10\x00\x02"  # property flags: delivery-mode, then its value (2: persistent)
    header = _frame(2, 1, CONTENT_HEADER.pack(60, 0, len(body)) + props)
    return (method + header + _frame(3, 1, body)) * count


def ack_bytes(count: int) -> bytes:
    return b"".join(_frame(1, 1, METHOD_IDS.pack(60, 80) + U64.pack(tag) + b"\x00") for tag in range(1, count + 1))


def one_round(data: bytes, acks: bytes, count: int) -> float:
    """Seconds of CPU for ``count`` messages in, routed, queued, delivered and acked."""
    unpack_header = HEADER.unpack_from
    unpack_ids = METHOD_IDS.unpack_from
    unpack_content = CONTENT_HEADER.unpack_from
    unpack_tag = U64.unpack_from
    pack_header = HEADER.pack
    pack_ids = METHOD_IDS.pack
    end = bytes((FRAME_END,))
    queue: deque[tuple[bytes, bytes, bytes, bytes]] = deque()
    routes = {b"orders": queue}
    consumer_tag = _shortstr(b"ctag-1")
    out: list[bytes] = []
    started = time.process_time()
    pos = 0
    n = len(data)
    next_tag = 1
    while pos < n:
        # basic.publish
        _, _, size = unpack_header(data, pos)
        start = pos + 7
        if data[start + size] != FRAME_END:
            raise ValueError("frame end")
        class_id, method_id = unpack_ids(data, start)
        at = start + 6  # ids, then the reserved short
        exchange = data[at + 1:at + 1 + data[at]]
        at += 1 + data[at]
        routing_key = data[at + 1:at + 1 + data[at]]
        pos = start + size + 1
        # content header
        _, _, size = unpack_header(data, pos)
        start = pos + 7
        if data[start + size] != FRAME_END:
            raise ValueError("frame end")
        _, _, body_size = unpack_content(data, start)
        props = data[start + 12:start + size]
        pos = start + size + 1
        # body
        _, _, size = unpack_header(data, pos)
        start = pos + 7
        body = data[start:start + size]
        if data[start + size] != FRAME_END:
            raise ValueError("frame end")
        pos = start + size + 1
        # route, queue, take
        target = routes.get(routing_key)
        if target is not None:
            target.append((exchange, routing_key, props, body))
        exchange, routing_key, props, body = queue.popleft()
        # basic.deliver, header, body
        method = (pack_ids(60, 60) + consumer_tag + U64.pack(next_tag) + b"\x00" + bytes((len(exchange),))
                  + exchange + bytes((len(routing_key),)) + routing_key)
        header = CONTENT_HEADER.pack(60, 0, len(body)) + props
        out.append(b"".join((pack_header(1, 1, len(method)), method, end, pack_header(2, 1, len(header)),
                             header, end, pack_header(3, 1, len(body)), body, end)))
        next_tag += 1
    for at in range(0, len(acks), 21):  # basic.ack: 7 header + 4 ids + 8 tag + 1 flag + 1 end
        _, _, size = unpack_header(acks, at)
        tag = unpack_tag(acks, at + 11)[0]
        if acks[at + 7 + size] != FRAME_END or tag > count:
            raise ValueError("ack")
    used = time.process_time() - started
    assert len(out) == count
    return used


def floor_us(messages: int = 200_000, rounds: int = 5) -> float:
    """The median of ``rounds`` rounds, in µs of CPU per message."""
    data = publish_bytes(messages, b"x" * 64, b"orders")
    acks = ack_bytes(messages)
    return statistics.median(one_round(data, acks, messages) / messages * 1e6 for _ in range(rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"floor: {floor_us(args.messages, args.rounds):.2f} µs/message (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
