"""The replication tap and a follower's copy: what the writers report, applied to another
directory, gives the same data (the store recovers the same messages, the logs read the same),
with a copy taken while the writers go on, and a peer's paths stay inside the directory."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.persistence import FsyncMode, MessageStore, replica_tap
from headrace.persistence.dedup_journal import DedupJournal
from headrace.persistence.definitions_log import DefinitionsLog
from headrace.persistence.mirror_log import MirrorLog
from headrace.persistence.mirror_reader import read_entries
from headrace.persistence.mirror_records import list_segments
from headrace.persistence.replica_files import INCOMPLETE_FILE, ReplicaFiles, is_incomplete, snapshot_ops
from headrace.persistence.replica_tap import KEEP_ONLY, WRITE, decode_ops, encode_op
from headrace.persistence.store_ops import Ack, Publish


@pytest.fixture
def tap(tmp_path: Path) -> Iterator[replica_tap.Tap]:
    t = replica_tap.Tap(tmp_path / "leader")
    replica_tap.install(t)
    yield t
    replica_tap.uninstall()


def pub(mid: int, queue: str = "q") -> Publish:
    return Publish(mid, "/", (queue,), "ex", f"rk.{mid}", b"\x80\x00", f"body-{mid}".encode() * (mid % 7 + 1), mid)


def ship(tap: replica_tap.Tap, follower: ReplicaFiles) -> None:
    while (batch := tap.take()) is not None:
        follower.apply(batch[1])
    follower.sync()


def recovered(path: Path) -> dict[tuple[str, str], list[tuple[int, bytes]]]:
    store = MessageStore(path, fsync=FsyncMode.OFF)
    rec = store.recover()
    out = {k: [(m.message_id, m.body) for m in v] for k, v in rec.queues.items() if v}
    store.close()
    return out


def entries(root: Path) -> list[tuple[int, bytes]]:
    return [(e.offset, e.body) for seg in list_segments(root, "/", "events") for e in read_entries(seg)]


def write_everything(leader: Path, rounds: int, rng: random.Random) -> None:
    store = MessageStore(leader / "store", fsync=FsyncMode.BATCH, segment_max_bytes=4000)
    store.recover()
    defs = DefinitionsLog(leader, compact_min_bytes=600)
    defs.load()
    defs.compact()
    dedup = DedupJournal(leader / "dedup", compact_bytes=500)
    mirror = MirrorLog(leader, "/", "events", segment_max_bytes=3000)
    mid = 1
    for r in range(rounds):
        ops: list[Publish | Ack] = []
        for _ in range(rng.randint(1, 20)):
            ops.append(pub(mid, rng.choice("ab")))
            mid += 1
        ops += [Ack(m, "/", q) for m in range(max(1, mid - 30), mid - 10) if rng.random() < 0.3 for q in "ab"]
        store.write_and_sync(ops)
        store.maybe_compact()
        defs.append([{"op": "put", "section": "queues", "entry": {"vhost": "/", "name": f"q{r}", "durable": True,
                                                                  "auto_delete": False, "arguments": {}}}])
        dedup.append([(1, f"k{r}", 10**12)], sync=False)
        if dedup.wants_compaction:
            dedup.rewrite([(1, f"k{r}", 10**12)])
        mirror.append_rows([(r * 10 + i, "rk", b"", b"body", b"") for i in range(3)])
    store.close()
    defs.close()
    dedup.close()
    mirror.close()


def test_the_tapped_writes_applied_elsewhere_give_the_same_data(tap: replica_tap.Tap, tmp_path: Path) -> None:
    leader, copy = tmp_path / "leader", tmp_path / "copy"
    follower = ReplicaFiles(copy)
    write_everything(leader, 60, random.Random(7))
    ship(tap, follower)
    assert recovered(copy / "store") == recovered(leader / "store") != {}
    assert DefinitionsLog(copy).load() == DefinitionsLog(leader).load()
    assert DedupJournal(copy / "dedup").load() == DedupJournal(leader / "dedup").load()
    assert entries(copy) == entries(leader) != []
    # every file but the store's preallocated zeros is byte for byte the same
    for path in leader.rglob("*"):
        if path.is_file():
            theirs = (copy / path.relative_to(leader)).read_bytes()
            assert theirs.rstrip(b"\0") == path.read_bytes().rstrip(b"\0"), path


def test_a_copy_taken_while_the_writers_go_on_is_exact_once_the_writes_after_its_start_are_applied(
        tap: replica_tap.Tap, tmp_path: Path) -> None:
    leader, copy = tmp_path / "leader", tmp_path / "copy"
    rng = random.Random(11)
    write_everything(leader, 20, rng)
    while tap.take() is not None:  # the copy starts here: what came before is in the files
        pass
    pieces = snapshot_ops(leader)
    first = next(pieces)  # the file list, then the files, read while more is written
    write_everything(leader, 15, rng)
    follower = ReplicaFiles(copy)
    (copy / "stale-file").parent.mkdir(parents=True, exist_ok=True)
    (copy / "stale-file").write_bytes(b"from an older epoch")
    follower.mark_incomplete()
    assert is_incomplete(copy)
    follower.apply(first)
    for piece in pieces:
        follower.apply(piece)
    ship(tap, follower)
    follower.mark_complete()
    assert not (copy / INCOMPLETE_FILE).exists() and not (copy / "stale-file").exists()
    assert recovered(copy / "store") == recovered(leader / "store")
    assert DefinitionsLog(copy).load() == DefinitionsLog(leader).load()


def test_nothing_is_reported_without_a_tap(tmp_path: Path) -> None:
    replica_tap.uninstall()
    replica_tap.wrote(tmp_path / "x", 0, b"data")
    assert replica_tap.current() is None


def test_spill_files_and_temporaries_are_not_replicated(tap: replica_tap.Tap, tmp_path: Path) -> None:
    replica_tap.wrote(tmp_path / "leader" / "spill" / "q.spill", 0, b"transient")
    replica_tap.wrote(tmp_path / "leader" / "defs.tmp", 0, b"half")
    replica_tap.wrote(tmp_path / "elsewhere", 0, b"outside")
    replica_tap.replaced(tmp_path / "leader" / "headrace.lock", b"123\n")  # the node's own
    assert tap.take() is None


def test_a_large_write_is_reported_in_pieces_and_batches_are_cut(tap: replica_tap.Tap, tmp_path: Path) -> None:
    big = bytes(range(256)) * (replica_tap.WRITE_PIECE // 256 * 3 + 1)
    replica_tap.wrote(tmp_path / "leader" / "store" / "1.seg", 100, big)
    batches = []
    while (b := tap.take()) is not None:
        batches.append(b)
    assert [pos for pos, _ in batches] == list(range(1, len(batches) + 1)) and len(batches) >= 2
    ops = [op for _, payload in batches for op in decode_ops(payload)]
    assert b"".join(op.data for op in ops) == big
    assert [op.n for op in ops] == [100 + i * replica_tap.WRITE_PIECE for i in range(len(ops))]


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "store/../../x", ""])
def test_a_peer_path_outside_the_directory_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="not a path inside the data directory"):
        list(decode_ops(encode_op(WRITE, path, 0, b"x")))


@pytest.mark.parametrize("cut", [1, 3, 10])
def test_a_cut_operation_is_an_error_not_a_partial_write(cut: int) -> None:
    whole = encode_op(WRITE, "store/1.seg", 5, b"0123456789")
    with pytest.raises(ValueError):
        list(decode_ops(whole[:-cut]))


def test_the_file_list_of_a_copy_deletes_what_the_leader_does_not_have_but_keeps_the_nodes_own(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    for name in ("store/9.seg", "cluster.instance", "headrace.lock", "keep-me"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(b"x")
    ReplicaFiles(copy).apply(encode_op(KEEP_ONLY, ".", 0, b"keep-me"))
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "cluster.instance", "headrace.lock", "keep-me"]


def test_a_copy_writes_into_the_files_that_are_there_now_not_into_ones_replaced_since(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    files = ReplicaFiles(copy)
    files.apply(encode_op(WRITE, "definitions.log", 0, b"old"))  # kept open between batches
    files.sync()
    # this node led meanwhile: its own writer put a new file under the name
    (copy / "definitions.log.new").write_bytes(b"new")
    (copy / "definitions.log.new").replace(copy / "definitions.log")
    files.apply(encode_op(KEEP_ONLY, ".", 0, b"definitions.log") + encode_op(WRITE, "definitions.log", 0, b"copied"))
    files.sync()
    assert (copy / "definitions.log").read_bytes() == b"copied"


def test_the_index_checkpoint_is_the_nodes_own(tap: replica_tap.Tap, tmp_path: Path) -> None:
    """The store's checkpoint is neither shipped nor part of a copy (NODE_OWN): the follower's
    store, with no checkpoint of its own, recovers the leader's messages by replaying its log."""
    leader, follower_root = tmp_path / "leader", tmp_path / "follower"
    store = MessageStore(leader / "store", fsync=FsyncMode.BATCH, segment_max_bytes=4000,
                         checkpoint_min_bytes=0)
    store.recover()
    store.write_and_sync([pub(m) for m in range(1, 200)])
    assert store.maybe_checkpoint() > 0
    store.write_and_sync([Ack(m, "/", "q") for m in range(1, 50)])
    store.close()
    assert (leader / "store" / "index.ckpt").exists()
    shipped = []
    while (batch := tap.take()) is not None:
        shipped += [op.path for op in decode_ops(batch[1])]
    assert shipped and not [p for p in shipped if "ckpt" in p]
    assert not [p for op in snapshot_ops(leader) for p in [next(decode_ops(op)).path]
                if "ckpt" in p] and "store/index.ckpt" in replica_tap.NODE_OWN
    follower = ReplicaFiles(follower_root)
    for op in snapshot_ops(leader):
        follower.apply(op)
    follower.sync()
    assert not (follower_root / "store" / "index.ckpt").exists()
    assert recovered(follower_root / "store") == recovered(leader / "store")
