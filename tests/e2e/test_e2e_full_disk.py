"""A full disk, for real: the broker's data directory is a small tmpfs that the test fills up.

The broker never stops: publishes it cannot write are nacked, the disk alarm blocks publishers,
consumers keep draining, and it resumes once there is room; nothing confirmed is lost across a
kill -9, and it restarts on a full disk. Spill on a full disk keeps every message; a damaged spill
record is skipped and counted. The disk alarm fires before the limit is passed, at any write rate.
"""

from __future__ import annotations

import threading
import time

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import wait_until

pytestmark = pytest.mark.timeout(120)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
NO_LIMIT = {"HEADRACE_DISK_FREE_LIMIT": "0"}  # only failed writes raise the disk alarm


def connect(proc, events: list[str] | None = None) -> pika.BlockingConnection:
    params = pika.URLParameters(proc.url)
    params.blocked_connection_timeout = 60
    conn = pika.BlockingConnection(params)
    if events is not None:
        conn.add_on_connection_blocked_callback(lambda c, f: events.append("blocked"))
        conn.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
    return conn


def pump(conn: pika.BlockingConnection, cond, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=0.1)
    return True


def confirmed_publish(ch, queue: str, body: bytes) -> bool:
    """True when acked, False when nacked."""
    try:
        ch.basic_publish("", queue, body, PERSISTENT)
        return True
    except pika.exceptions.NackError:
        return False


def ids_in(proc, queue: str) -> list[int]:
    conn = connect(proc)
    ch = conn.channel()
    ids = []
    while True:
        method, _, body = ch.basic_get(queue)
        if method is None:
            break
        ids.append(int(body.split(b":")[0]))
    conn.close()
    return ids


def body(i: int, size: int = 10_000) -> bytes:
    return f"{i}:".encode().ljust(size, b".")


def test_full_disk_nacks_blocks_keeps_draining_resumes_and_loses_nothing(small_tmpfs, broker_factory):
    fs = small_tmpfs("16m")
    proc = broker_factory(data_dir=fs.path / "data", env=NO_LIMIT)
    events: list[str] = []
    pub = connect(proc, events)
    ch = pub.channel()
    ch.confirm_delivery()
    ch.queue_declare("full", durable=True)
    for i in range(200):
        assert confirmed_publish(ch, "full", body(i))
    filler = fs.fill(leave=0)

    # what still fits in the zeros the store keeps ahead of its last record (persistence/segments.py,
    # 1 MiB) is on disk and confirmed; the first publish past them is nacked: it could not be written
    nacked = next(i for i in range(200, 400) if not confirmed_publish(ch, "full", body(i)))
    assert pump(pub, lambda: "blocked" in events), proc.log[-3000:]
    assert proc.proc.poll() is None
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/overview").json()["alarms"] == ["disk"]

    consumer = connect(proc)
    cch = consumer.channel()
    taken = []
    for _ in range(100):  # consumers keep draining on a full disk
        method, _, got = cch.basic_get("full")
        taken.append(int(got.split(b":")[0]))
        cch.basic_ack(method.delivery_tag)
    assert taken == list(range(100))

    filler.unlink()  # room again: the pending records go out and the alarm clears
    assert pump(pub, lambda: events[-1:] == ["unblocked"]), proc.log[-3000:]
    assert confirmed_publish(ch, "full", body(nacked + 1))  # its fsync covers the acks before it
    proc.kill()
    proc.start()
    left = ids_in(proc, "full")
    # every confirmed message not acked is there, no acked one is; the nacked one may be
    assert [i for i in left if i != nacked] == list(range(100, nacked)) + [nacked + 1]
    assert "Traceback" not in proc.log


def test_broker_restarts_on_a_full_disk_with_every_confirmed_message(small_tmpfs, broker_factory):
    fs = small_tmpfs("8m")
    proc = broker_factory(data_dir=fs.path / "data", env=NO_LIMIT)
    conn = connect(proc)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("restart-full", durable=True)
    for i in range(100):
        assert confirmed_publish(ch, "restart-full", body(i))
    fs.fill(leave=0)
    proc.kill()
    proc.start()  # recovery and start-up on a disk with no room at all
    conn = connect(proc)
    ch = conn.channel()
    ch.confirm_delivery()
    # what fits in the zeros the store keeps ahead of its last record (persistence/segments.py) is
    # confirmed; the first publish past them is nacked (a blocked connection after it)
    nacked = next(i for i in range(100, 300) if not confirmed_publish(ch, "restart-full", body(i)))
    assert [i for i in ids_in(proc, "restart-full") if i != nacked] == list(range(nacked))
    assert proc.proc.poll() is None


def test_spill_on_a_full_disk_keeps_every_message_in_order(small_tmpfs, broker_factory):
    fs = small_tmpfs("8m")
    proc = broker_factory(data_dir=fs.path / "data",
                          env={**NO_LIMIT, "HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "16"})
    setup = connect(proc)
    setup.channel().queue_declare("spilling")  # transient: overflow goes to spill files
    setup.close()
    filler = fs.fill(leave=1 << 20)  # room for about a quarter of what spills
    total = 1028
    done = threading.Event()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            conn = connect(proc)
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(total):
                ch.basic_publish("", "spilling", body(i, 4000))
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.set()

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    got: list[int] = []
    consumer = connect(proc)
    cch = consumer.channel()
    deadline = time.monotonic() + 60
    while len(got) < total and time.monotonic() < deadline:
        method, _, got_body = cch.basic_get("spilling", auto_ack=True)
        if method is None:
            consumer.process_data_events(time_limit=0.02)
            continue
        got.append(int(got_body.split(b":")[0]))
    thread.join(10)
    filler.unlink()
    assert not errors, (errors, proc.log[-3000:])
    assert got == list(range(total)), proc.log[-3000:]
    assert proc.proc.poll() is None and "Traceback" not in proc.log


def test_a_damaged_spill_record_is_skipped_counted_and_the_broker_serves_on(tmp_path, broker_factory):
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "16",
                               "HEADRACE_METRICS": "per-queue"})
    conn = connect(proc)
    ch = conn.channel()
    ch.queue_declare("damaged")
    for i in range(400):  # 16 in memory, the rest spilled
        ch.basic_publish("", "damaged", body(i, 2000))
    ch.queue_declare("damaged", passive=True)  # a round trip: every publish was handled
    spill_dir = proc.data_dir / "spill"
    (segment,) = sorted(spill_dir.glob("*/*.seg"))[:1]
    while segment.stat().st_size < 100_000:  # written in 256 KiB buffers: wait for one
        conn.process_data_events(time_limit=0.05)
    raw = bytearray(segment.read_bytes())
    raw[50_000] ^= 0xFF  # one bit-rot inside some record
    segment.write_bytes(bytes(raw))
    got = []
    for method, _, got_body in ch.consume("damaged", auto_ack=True, inactivity_timeout=3):
        if method is None:
            break
        got.append(int(got_body.split(b":")[0]))
        if len(got) == 399:
            break
    ch.cancel()
    assert len(got) == 399 and got == sorted(got)
    assert ch.queue_declare("damaged", passive=True).method.message_count == 0
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        metrics = http.get("/metrics").text
    assert 'headrace_queue_messages_spill_damaged_total{vhost="/",queue="damaged"} 1' in metrics
    assert "damaged record" in proc.log and proc.proc.poll() is None


def test_disk_alarm_holds_its_limit_against_a_fast_publisher(small_tmpfs, broker_factory):
    fs = small_tmpfs("40m")
    limit = 24 << 20
    proc = broker_factory(data_dir=fs.path / "data", env={"HEADRACE_DISK_FREE_LIMIT": str(limit)})
    setup = connect(proc)
    setup.channel().queue_declare("fast", durable=True)
    setup.close()
    stop = threading.Event()

    def flood() -> None:  # no confirms: as fast as the socket takes it
        conn = connect(proc)
        ch = conn.channel()
        payload = b"x" * (256 << 10)
        try:
            while not stop.is_set():
                ch.basic_publish("", "fast", payload, PERSISTENT)
        except (pika.exceptions.AMQPError, OSError):
            pass

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    lowest = fs.free()
    alarm_seen = False
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        settle = None
        while time.monotonic() < deadline:
            lowest = min(lowest, fs.free())
            if not alarm_seen and http.get("/api/overview").json()["alarms"] == ["disk"]:
                alarm_seen = True
                settle = time.monotonic() + 1.0  # what was in flight lands
            if settle is not None and time.monotonic() > settle:
                break
    stop.set()
    proc.kill()
    assert alarm_seen, proc.log[-3000:]
    # a check every MiB written: the limit holds within a few MiB in flight
    assert lowest > limit - (4 << 20), (lowest >> 20, limit >> 20)


def test_mirror_log_on_a_full_disk_keeps_every_record_once(small_tmpfs, broker_factory):
    from headrace.persistence.mirror_log import list_segments, read_entries

    fs = small_tmpfs("8m")
    proc = broker_factory(data_dir=fs.path / "data", env=NO_LIMIT)
    conn = connect(proc)
    ch = conn.channel()
    ch.exchange_declare("mirrored", "topic", durable=True, arguments={"x-mirror": True})
    for i in range(50):
        ch.basic_publish("mirrored", "k", body(i, 1000))

    def bodies() -> list[int]:
        return [int(e.body.split(b":")[0]) for s in list_segments(proc.data_dir, "/", "mirrored")
                for e in read_entries(s)]

    assert pump(conn, lambda: len(bodies()) == 50), proc.log[-2000:]
    filler = fs.fill(leave=0)
    for i in range(50, 300):  # ~250 kB the mirror log has no room for
        ch.basic_publish("mirrored", "k", body(i, 1000))
    assert pump(conn, lambda: "wait for room" in proc.log), proc.log[-2000:]  # (and blocked)
    filler.unlink()
    assert pump(conn, lambda: len(bodies()) >= 300, 15), proc.log[-2000:]
    assert bodies() == list(range(300))  # in order, none twice, none lost
    assert proc.proc.poll() is None and "Traceback" not in proc.log


def test_durable_declares_on_a_full_disk_are_saved_once_there_is_room(small_tmpfs, broker_factory):
    """Definitions that cannot be saved keep the disk alarm up and are saved again on a timer, not
    only when some client sends something: with nobody else talking to the broker, room coming back
    is enough for the exchange, queue and binding declared on the full disk to survive a kill -9.
    (The declares run in a thread of their own: whether their replies wait for the disk or not,
    they are answered once there is room.)"""
    fs = small_tmpfs("8m")
    proc = broker_factory(data_dir=fs.path / "data", env=NO_LIMIT)
    conn = connect(proc)
    conn.channel().queue_declare("before-full", durable=True)
    conn.close()
    filler = fs.fill(leave=0)
    answered: list[str] = []

    def declare() -> None:
        conn = connect(proc)
        ch = conn.channel()
        # a change is one record appended to the definitions log, which a small one may find room
        # for in the log's last page; this one needs new pages, and those after it wait behind it
        ch.exchange_declare("made-full", "topic", durable=True, arguments={"x-note": "n" * 20_000})
        ch.queue_declare("made-full", durable=True)
        ch.queue_bind("made-full", "made-full", "k.#")
        answered.append("bind-ok")
        conn.close()

    declarer = threading.Thread(target=declare, daemon=True)
    declarer.start()
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert wait_until(lambda: http.get("/api/overview").json()["alarms"] == ["disk"]), proc.log[-2000:]
    assert wait_until(lambda: "definitions not saved" in proc.log), proc.log[-2000:]
    filler.unlink()
    declarer.join(15)
    assert answered == ["bind-ok"]
    assert wait_until(lambda: "definitions saved" in proc.log, timeout=10), proc.log[-2000:]
    assert proc.log.count("definitions not saved") == 1  # once, not once per retry
    proc.kill()
    proc.start()
    conn = connect(proc)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("made-full", "k.1", b"routed", PERSISTENT, mandatory=True)  # unroutable would raise
    assert ch.basic_get("made-full", auto_ack=True)[2] == b"routed"
    assert ch.queue_declare("before-full", passive=True).method.queue == "before-full"
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/overview").json()["alarms"] == []
    conn.close()
    assert "Traceback" not in proc.log
