"""CPU cost of the broker core per message, without sockets: publish -> dispatch -> deliver -> ack.

Real ``Session``s over real ``AMQPConnection``s are fed encoded frames in batches, as the network
shell would feed them, and the deliveries are drained from the consumer's buffer. It measures only
the synchronous core (protocol, session, delivery owner, queues), so it is steady on a busy machine
where the socket benchmarks in ``run.py`` are not.

    .venv/bin/python benchmarks/bench_core.py [--messages 200000] [--queues 1] [--rounds 5] [--mirror]

``--queues 10`` with a fanout exchange is the fanout shape; 1 is pubsub. Prints the best round's
process CPU time per published message (microseconds) and messages per CPU second.

``--mirror`` measures what mirroring costs: the publishes go through a fanout exchange, plain and
mirrored rounds alternate, and in a mirrored round the mirror writer's work (take the outbox's
messages by exchange, ``MirrorLog.append_messages`` into a real log, an fsync per ``--sync-every``
batches) runs after each batch, in this process. Prints both figures and their ratio: the CPU share
of mirroring, which the machine's load does not move the way it moves ``bench_mirror.py``'s rates.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import tempfile
import time
from pathlib import Path

from headrace.persistence.mirror_log import MirrorLog
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.outbox import mirror_row
from headrace.server.broker.ports import ShellPorts
from headrace.server.session import Session

BATCH = 500  # publishes per receive, about what one 256 KiB read holds for small messages
PREFETCH = 1000
NOW = 1000.0


def _idle() -> None:
    """No shell task runs in these benchmarks: the core is driven directly, so nothing is woken."""


def idle_ports() -> ShellPorts:
    """The broker's ports when no shell runs (the other in-process benchmarks use them too)."""
    return ShellPorts(wake_clock=_idle, wake_flusher=_idle, wake_mirror_writer=_idle, wake_stream_pump=_idle,
                      saturation_released=lambda queue: None, policies_changed=_idle,
                      user_deleted=lambda name: None)


def handshake() -> bytes:
    return (b"AMQP\x00\x00\x09\x01"
            + encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US"))
            + encode_method_frame(0, m.ConnectionTuneOk(0, 131072, 0))
            + encode_method_frame(0, m.ConnectionOpen("/"))
            + encode_method_frame(1, m.ChannelOpen()))


def session(broker: Broker) -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    s = Session(broker, conn, wake=_idle)
    s.handle(conn.receive_data(handshake()), NOW)
    conn.data_to_send()
    return s, conn


def delivery_tags(data: bytes) -> int:
    """The highest delivery tag among the basic.deliver frames in ``data`` (0 if none)."""
    last, pos = 0, 0
    while pos < len(data):
        ftype, _, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 1 and data[pos + 7:pos + 11] == b"\x00\x3c\x00\x3c":  # basic.deliver
            tag_len = data[pos + 11]
            last = struct.unpack_from(">Q", data, pos + 12 + tag_len)[0]
        pos += 8 + size
    return last


class MirrorSink:
    """The mirror writer's work for one batch, in this process: group, append, sync now and then."""

    def __init__(self, root: Path, sync_every: int) -> None:
        self.logs: dict[tuple[str, str], MirrorLog] = {}
        self.root = root
        self.sync_every = sync_every
        self.batches = 0

    def write(self, broker: Broker) -> None:
        groups = broker.take_mirror_records()
        self.batches += 1
        for key, rows in groups.items():
            log = self.logs.get(key)
            if log is None:
                log = self.logs[key] = MirrorLog(self.root, *key)
                log.recover()
            log.append_messages(rows, mirror_row)
            log.flush(fsync=bool(self.sync_every) and self.batches % self.sync_every == 0)

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def run(messages: int, queues: int, mirror: MirrorSink | None = None, fanout: bool = False) -> float:
    broker = Broker(ports=idle_ports())
    broker.ensure_default("/", "guest", "guest")
    pub, pconn = session(broker)
    consumers = []
    exchange = "" if queues == 1 and not fanout else "bench.fanout"
    setup = encode_method_frame(1, m.ExchangeDeclare(
        exchange="bench.fanout", type="fanout", arguments={"x-mirror": True} if mirror else {}))
    for i in range(queues):
        setup += encode_method_frame(1, m.QueueDeclare(queue=f"q{i}"))
        if exchange:
            setup += encode_method_frame(1, m.QueueBind(queue=f"q{i}", exchange=exchange))
    pub.handle(pconn.receive_data(setup), NOW)
    pconn.data_to_send()
    for i in range(queues):
        c, cconn = session(broker)
        c.handle(cconn.receive_data(encode_method_frame(1, m.BasicQos(0, PREFETCH, False))
                                    + encode_method_frame(1, m.BasicConsume(queue=f"q{i}", consumer_tag="c"))), NOW)
        cconn.data_to_send()
        consumers.append((c, cconn))
    props = encode_properties(BasicProperties(delivery_mode=1))
    one = (encode_method_frame(1, m.BasicPublish(exchange=exchange, routing_key="q0"))
           + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 16) + props) + encode_frame(3, 1, b"x" * 16))
    batch = one * BATCH
    start = time.process_time()
    for _ in range(messages // BATCH):
        pub.handle(pconn.receive_data(batch), NOW)
        pconn.data_to_send()
        if mirror is not None:
            mirror.write(broker)
        for c, cconn in consumers:
            tag = delivery_tags(cconn.data_to_send())
            if tag:
                c.on_drain(NOW)
                c.handle(cconn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=tag, multiple=True))), NOW)
    took = time.process_time() - start
    for queue in broker.vhosts["/"].queues.values():  # every message was delivered, all but the last batch acked
        assert queue.messages_ready == 0 and queue.messages_unacked <= BATCH, (queue.messages_ready, queue.messages_unacked)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--queues", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mirror", action="store_true", help="plain against mirrored fanout, alternating")
    ap.add_argument("--sync-every", type=int, default=0,
                    help="with --mirror: fsync the log every N batches (0: never, as the writer between syncs)")
    args = ap.parse_args()
    if args.mirror:
        plain, mirrored = [], []
        for r in range(args.rounds):
            for kind in (("plain", "mirrored") if r % 2 == 0 else ("mirrored", "plain")):
                with tempfile.TemporaryDirectory(prefix="bench-core-mirror-") as tmp:
                    sink = MirrorSink(Path(tmp), args.sync_every) if kind == "mirrored" else None
                    took = run(args.messages, args.queues, sink, fanout=True)
                    if sink is not None:
                        sink.close()
                (plain if kind == "plain" else mirrored).append(took / args.messages * 1e6)
        ratios = [mi / pl for pl, mi in zip(plain, mirrored)]
        print(f"queues={args.queues} messages={args.messages} rounds={args.rounds} sync_every={args.sync_every}: "
              f"plain {statistics.median(plain):.2f} us/msg, mirrored {statistics.median(mirrored):.2f} us/msg, "
              f"mirroring +{(statistics.median(ratios) - 1) * 100:.1f}% CPU (per-round ratios "
              f"{', '.join(f'{x:.3f}' for x in ratios)})")
        return
    best = min(run(args.messages, args.queues) for _ in range(args.rounds))
    print(f"queues={args.queues} messages={args.messages} best CPU {best:.3f} s: "
          f"{best / args.messages * 1e6:.2f} us/msg, {args.messages / best:,.0f} msg/CPU-s")


if __name__ == "__main__":
    main()
