"""The message store's index checkpoint through a real ``headrace serve`` killed with SIGKILL: a
restart that starts from the checkpoint and replays the log after it loses nothing confirmed and
brings back nothing acked, also when the kill lands while a checkpoint is being written."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest
from e2e_support import publish_persistent, sync_marker

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

QUEUE = "ckpt-durable"
# small segments and no minimum: a checkpoint at the flusher's next maintenance pass (5 s)
ENV = {"HEADRACE_SEGMENT_MAX_BYTES": "65536", "HEADRACE_CHECKPOINT_MIN_BYTES": "0"}
BODY = b"b" * 300


def publish_confirmed(url: str, prefix: str, count: int) -> list[str]:
    return publish_persistent(url, QUEUE, prefix, count, lambda _: BODY)


def get_and_ack(url: str, count: int | None) -> list[str]:
    """Take ``count`` messages (all with None) and ack them; a confirmed publish afterwards makes
    the acks' group written before this returns (its fsync covers every earlier store op)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ids = []
    while count is None or len(ids) < count:
        method, props, _ = ch.basic_get(QUEUE)
        if method is None:
            break
        ids.append(props.message_id)
    if ids:
        ch.basic_ack(0, multiple=True)
    sync_marker(ch)
    conn.close()
    return ids


def wait_for(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def test_restart_from_the_checkpoint_after_kill_9(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = broker_factory("--log-level", "info", data_dir=data, env=ENV)
    confirmed = publish_confirmed(proc.url, "a", 1500)
    checkpoint = data / "store" / "index.ckpt"
    assert wait_for(checkpoint, 20), proc.log[-3000:]
    acked = get_and_ack(proc.url, 400)  # acks of checkpointed messages, written after it
    confirmed += publish_confirmed(proc.url, "b", 300)  # the log after the checkpoint
    acked += get_and_ack(proc.url, 100)
    proc.kill()
    proc = broker_factory("--log-level", "info", data_dir=data, env=ENV)
    assert "index checkpoint at segment" in proc.log, proc.log[-3000:]
    recovered = get_and_ack(proc.url, None)
    assert len(recovered) == len(set(recovered))
    assert set(recovered) == set(confirmed) - set(acked)
    assert recovered == [m for m in confirmed if m not in set(acked)]  # in publish order
    # those acks are written (the marker's confirm covers them): nothing comes back after a kill
    proc.kill()
    proc = broker_factory("--log-level", "info", data_dir=data, env=ENV)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert conn.channel().queue_declare(QUEUE, durable=True, passive=True).method.message_count == 0
    conn.close()
    assert proc.stop() == 0


def _publisher(url: str, prefix: str, confirmed: list[str], stop: threading.Event) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()
        i = 0
        while not stop.is_set():
            mid = f"{prefix}-{i}"
            ch.basic_publish("", QUEUE, BODY, pika.BasicProperties(delivery_mode=2, message_id=mid))
            confirmed.append(mid)
            i += 1
    except (pika.exceptions.AMQPError, OSError):
        return  # killed under us: what was confirmed is in ``confirmed``


def test_kill_9_while_the_checkpoint_is_written(broker_factory, tmp_path: Path) -> None:
    """The test watches the store directory and sends SIGKILL the moment ``index.ckpt.tmp``
    appears, with publishers waiting for confirms, three times over: every confirmed message
    is there after each restart, none twice, and none that was acked before the kill."""
    data = tmp_path / "data"
    store = data / "store"
    proc = broker_factory(data_dir=data, env=ENV)
    gone: set[str] = set()  # acked, and the acks written
    confirmed: list[str] = publish_confirmed(proc.url, "seed", 4000)  # a checkpoint worth catching
    kills_mid_write = 0
    for cycle in range(3):
        gone |= set(get_and_ack(proc.url, 500))
        stop = threading.Event()
        lists: list[list[str]] = [[], []]
        threads = [threading.Thread(target=_publisher, args=(proc.url, f"c{cycle}p{n}", lists[n], stop),
                                    daemon=True) for n in range(2)]
        for t in threads:
            t.start()
        tmp = store / "index.ckpt.tmp"
        deadline = time.monotonic() + 30
        while not tmp.exists() and time.monotonic() < deadline:
            pass  # a busy watch: the temporary lives for milliseconds
        assert proc.proc is not None
        os.kill(proc.proc.pid, signal.SIGKILL)
        caught = tmp.exists()
        kills_mid_write += caught
        proc.proc.wait(10)
        stop.set()
        for t in threads:
            t.join(30)
        confirmed += lists[0] + lists[1]
        proc = broker_factory(data_dir=data, env=ENV)
        assert not tmp.exists()  # the interrupted write's leftover is gone
        recovered = get_and_ack(proc.url, None)
        assert len(recovered) == len(set(recovered)), "a message came back twice"
        assert not set(recovered) & gone, "an acked message came back"
        missing = set(confirmed) - gone - set(recovered)
        assert not missing, f"cycle {cycle}: {len(missing)} confirmed messages lost"
        # put them back for the next cycle's checkpoint to cover
        gone |= set(recovered)
        confirmed += publish_confirmed(proc.url, f"r{cycle}", 3000)
    assert kills_mid_write >= 1, "no kill landed while a checkpoint was being written"
    assert proc.stop() == 0


def test_a_clean_stop_checkpoints_the_end_of_the_log(broker_factory, tmp_path: Path) -> None:
    """After a clean stop the next start reads the checkpoint the stop wrote and replays no log
    (without it: the log since the last periodic checkpoint, tens of kilobytes here), and finds
    every message not acked, in order."""
    data = tmp_path / "data"
    proc = broker_factory("--log-level", "info", data_dir=data, env=ENV)
    confirmed = publish_confirmed(proc.url, "s", 1200)
    acked = get_and_ack(proc.url, 200)
    assert proc.stop() == 0
    proc = broker_factory("--log-level", "info", data_dir=data, env=ENV)
    found = re.search(r"index checkpoint at segment \d+ offset \d+, (\d+) bytes of log replayed", proc.log)
    assert found, proc.log[-3000:]
    # none, or less than the stop would have written a checkpoint for (a periodic one came just
    # before the stop): a quarter of ~30 B for each of the 1,000 messages left
    assert int(found.group(1)) < 1000 * 30 // 4, proc.log[-3000:]
    assert get_and_ack(proc.url, None) == confirmed[200:] and acked == confirmed[:200]
    assert proc.stop() == 0
