"""The message store and spill files on a real, full filesystem (a small tmpfs): a failed write
leaves every file ending in a whole record, nothing appended is lost, and writing resumes once
there is room."""

from __future__ import annotations

import errno

import pytest

from headrace.persistence import Ack, MessageStore, Publish, SpillStore
from headrace.persistence.records import iter_records
from headrace.persistence.segments import list_segments, zero_tail
from headrace.queues.message import Message, QueueEntry


def pub(mid: int, size: int) -> Publish:
    return Publish(mid, "/", ("q",), "", "q", b"\x80\x00", bytes([mid % 251]) * size, mid)


def whole_records(directory) -> int:
    """Records in the segments; asserts each file ends at its last record, or in the zeros a syncing
    writer keeps ahead of it (never in a torn record)."""
    count = 0
    for _, path in list_segments(directory):
        data = path.read_bytes()
        end = 0
        for rec in iter_records(data):
            count += 1
            end = rec.end
        assert end == len(data) or zero_tail(data, end), f"{path} ends in a torn record"
    return count


def test_store_write_on_a_full_disk_fails_whole_and_is_written_once_there_is_room(small_tmpfs):
    fs = small_tmpfs("4m")
    store = MessageStore(fs.path / "store", segment_max_bytes=1 << 20)
    store.recover()
    store.write_and_sync([pub(i, 10_000) for i in range(1, 101)])  # ~1 MB, on disk
    filler = fs.fill(leave=300_000)
    with pytest.raises(OSError) as failed:  # ~2.5 MB: more than the room and the store's zeros ahead
        store.write_and_sync([pub(i, 10_000) for i in range(101, 351)])
    assert failed.value.errno == errno.ENOSPC
    assert store.failing is not None
    assert whole_records(fs.path / "store") >= 100  # cut back to whole records
    with pytest.raises(OSError):
        store.write_and_sync([Ack(1, "/", "q")])  # still full: still pending, still whole
    assert whole_records(fs.path / "store") >= 100
    filler.unlink()
    store.write_and_sync([Ack(2, "/", "q")])  # room again: everything pending goes out in order
    assert store.failing is None
    store.close()

    again = MessageStore(fs.path / "store", segment_max_bytes=1 << 20)
    recovered = again.recover()
    assert recovered.truncated_bytes == 0
    assert [m.message_id for m in recovered.queues[("/", "q")]] == list(range(3, 351))
    again.close()


def test_spill_on_a_full_disk_keeps_entries_in_memory_and_files_whole(small_tmpfs):
    fs = small_tmpfs("2m")
    spill = SpillStore(fs.path / "spill", segment_max_bytes=512 << 10)
    backing = spill.backing("q")
    body = b"b" * 4000
    entries = [QueueEntry(i, Message(i, "", "q", b"\x00\x00", body)) for i in range(1, 1001)]  # ~4 MB
    for e in entries:
        backing.append([e])  # never raises: what does not fit stays in memory
    assert spill.failing()
    for _, path in list_segments(next((fs.path / "spill").iterdir())):
        data = path.read_bytes()
        assert sum(len(r.payload) + 9 for r in iter_records(data)) == len(data)  # whole records
    got = [e.seq for e in backing.read_batch(600, 1 << 30)]  # from the files, then from memory
    assert got == list(range(1, 601))
    assert spill.retry()  # reading freed files: room again
    got += [e.seq for e in backing.read_batch(1000, 1 << 30)]
    assert got == list(range(1, 1001)) and backing.depth() == 0 and backing.damaged == 0
    spill.close()


def test_spill_drained_from_memory_is_no_longer_failing(small_tmpfs):
    fs = small_tmpfs("1m")
    spill = SpillStore(fs.path / "spill", segment_max_bytes=512 << 10)
    backing = spill.backing("q")
    filler = fs.fill(leave=0)
    body = b"b" * 4000
    for i in range(1, 301):  # ~1.2 MB with no room at all: all of it waits in memory
        backing.append([QueueEntry(i, Message(i, "", "q", b"\x00\x00", body))])
    assert spill.failing()
    assert [e.seq for e in backing.read_batch(1000, 1 << 30)] == list(range(1, 301))
    assert spill.retry() and not spill.failing()  # nothing waits: the failure is over
    filler.unlink()
    spill.close()


def test_a_mirror_write_that_failed_on_a_full_disk_never_resurfaces_after_the_reopen(small_tmpfs):
    """The mirror writer's way with a failed write: close the log, reopen it (which cuts the torn
    tail) and write on. No byte of the failed write may reach the file later (a buffered file's
    finalizer used to append them after the new records, hiding those from every reader)."""
    import gc

    from headrace.persistence.mirror_log import MirrorLog, read_entries

    fs = small_tmpfs("2m")
    first = MirrorLog(fs.path, "/", "x")
    first.recover()
    first.append_rows([(1_000 + i, "k", b"", b"%d:" % i + b"." * 997, b"") for i in range(50)])
    first.flush()
    filler = fs.fill(leave=0)
    with pytest.raises(OSError):  # a small batch (one that a buffered file would hold) with no room
        for n in range(50, 400, 4):  # past what the file's last page still holds
            first.append_rows([(2_000 + i, "k", b"", b"%d:" % i + b"." * 997, b"") for i in range(n, n + 4)])
            first.flush()
    try:
        first.close()
    except OSError:
        pass  # the writer ignores it too: the reopen cuts what did not make it
    filler.unlink()
    again = MirrorLog(fs.path, "/", "x")
    resume = again.recover()
    again.append_rows([(3_000 + i, "k", b"", b"%d:" % i + b"." * 997, b"")
                       for i in range(resume, resume + 100)])
    again.flush()
    del first
    gc.collect()  # a finalizer of the failed log runs here, if it has anything to write
    again.close()
    (segment,) = sorted((fs.path / "mirror").rglob("*.log"))
    entries = list(read_entries(segment))
    assert sum(len(r.payload) + 9 for r in iter_records(segment.read_bytes())) == segment.stat().st_size
    assert [e.offset for e in entries] == list(range(resume + 100))
    assert [int(e.body.split(b":")[0]) for e in entries] == list(range(resume + 100))
