"""AMQP codec micro-benchmark: ns per call of what every message crosses, one JSON line per case.

    python benchmarks/bench_codec.py [--number N] [--rounds R] [--package NAME ...]

Cases: basic.publish decode, basic.deliver encode, basic.ack decode and encode, each through the
hand-written fast path the connection uses and through the generic method codec; and a whole
publish (method, header and body frames) through ``AMQPConnection.receive_data``. Each figure is
the best of R rounds of N calls, in process CPU time (the least disturbed by other work on the
machine).

``--package`` (repeatable) names the protocol package to import, so that a copy of an older
``server/amqp`` (it imports only itself; put its parent on PYTHONPATH) is measured in the same
process, alternating with the current one round by round, and each case reports the ratio.
"""

from __future__ import annotations

import argparse
import importlib
import json
import struct
import time
import timeit
from collections.abc import Callable
from typing import Any

BODY = bytes(128)
BATCH = 100  # publishes per receive_data call


def cases(package: str) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (call, messages per call)"""
    m: Any = importlib.import_module(f"{package}.methods")
    codec: Any = importlib.import_module(f"{package}.codec")
    properties: Any = importlib.import_module(f"{package}.properties")
    connection: Any = importlib.import_module(f"{package}.connection")
    decode_ack, decode_publish, encode_deliver = codec.decode_ack, codec.decode_publish, codec.encode_deliver
    props = properties.encode_properties(properties.BasicProperties(delivery_mode=2))
    publish = m.BasicPublish(exchange="amq.direct", routing_key="bench.key", mandatory=True)
    deliver = m.BasicDeliver(consumer_tag="ctag-1.0123456789", delivery_tag=123456, redelivered=False,
                             exchange="amq.direct", routing_key="bench.key")
    ack = m.BasicAck(delivery_tag=123456, multiple=False)
    publish_payload = m.encode_method(publish)
    deliver_payload = m.encode_method(deliver)
    ack_payload = m.encode_method(ack)

    conn = connection.AMQPConnection(server_properties={})
    conn.receive_data(b"AMQP\x00\x00\x09\x01" + b"".join((
        codec.encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00u\x00p", "en_US")),
        codec.encode_method_frame(0, m.ConnectionTuneOk(0, 131072, 0)),
        codec.encode_method_frame(0, m.ConnectionOpen("/")),
        codec.encode_method_frame(1, m.ChannelOpen()),
    )))
    conn.data_to_send()
    header = struct.pack(">HHQ", 60, 0, len(BODY)) + props
    frames = (codec.encode_method_frame(1, publish) + codec.encode_frame(2, 1, header)
              + codec.encode_frame(3, 1, BODY)) * BATCH
    encode, decode = m.encode_method, m.decode_method
    return {
        "publish decode, fast path": (lambda: decode_publish(publish_payload), 1),
        "publish decode, generic": (lambda: decode(publish_payload), 1),
        "deliver encode, fast path (3 frames)": (
            lambda: encode_deliver(1, "ctag-1.0123456789", 123456, False, "amq.direct", "bench.key", props, BODY,
                                   131072), 1),
        "deliver encode, generic (arguments only)": (lambda: encode(deliver), 1),
        "deliver decode, generic": (lambda: decode(deliver_payload), 1),
        "ack decode, fast path": (lambda: decode_ack(ack_payload), 1),
        "ack decode, generic": (lambda: decode(ack_payload), 1),
        "ack encode, generic (confirms)": (lambda: encode(ack), 1),
        "publish encode, generic": (lambda: encode(publish), 1),
        f"receive_data, {BATCH} whole publishes": (lambda: conn.receive_data(frames), BATCH),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--package", action="append", default=[])
    args = parser.parse_args()
    packages = args.package or ["headrace.server.amqp"]
    suites = {package: cases(package) for package in packages}
    for name in suites[packages[0]]:
        best = {package: float("inf") for package in packages}
        for _ in range(args.rounds):
            for package in packages:  # A B A B: a busy moment hits both
                call, per_call = suites[package][name]
                number = max(1, args.number // per_call)
                seconds = timeit.timeit(call, number=number, timer=time.process_time)  # CPU time: a busy
                best[package] = min(best[package], seconds / (number * per_call) * 1e9)  # machine adds less noise
        line: dict[str, object] = {"case": name, **{package: round(ns, 1) for package, ns in best.items()}}
        if len(packages) == 2:
            line["ratio"] = round(best[packages[1]] / best[packages[0]], 3)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
