"""The mirror log's framing: the C functions and the pure-Python ones give the same bytes, the same
index entries and the same state, for rows and for the broker's messages, across segment rolls,
index intervals, clamped timestamps and every kind of message meta; both refuse what the log cannot
hold; and a log written by either reads back as what was published."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from headrace.persistence import _mirror_frame as compiled
from headrace.persistence import mirror_frame
from headrace.persistence.mirror_log import MirrorLog, list_segments, read_entries
from headrace.persistence.mirror_records import MirrorRow
from headrace.queues import Message
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker.outbox import mirror_row

PROPS = [
    b"",
    encode_properties(BasicProperties()),
    encode_properties(BasicProperties(delivery_mode=2, priority=3)),
    encode_properties(BasicProperties(content_type="text/plain")),  # flag bit 15: a meta
    encode_properties(BasicProperties(message_id="m-1", delivery_mode=1)),  # flag bit 7: a meta
    encode_properties(BasicProperties(headers={"a": 1, "b": b"z"}, content_type="application/json")),
]
KEYS = ["k", "orders.eu.paid", "ключ", "", "k" * 255]


def rows(n: int, seed: int = 7) -> list[MirrorRow]:
    rng = random.Random(seed)
    return [(1_000 + rng.randint(-5, 5), rng.choice(KEYS), rng.choice(PROPS), rng.randbytes(rng.randint(0, 3000)),
             rng.choice([b"", b'{"h":null,"ct":"t","id":null}']))
            for _ in range(n)]


def messages(n: int, seed: int = 11) -> list[Message]:
    rng = random.Random(seed)
    return [Message(i, "ex", rng.choice(KEYS), rng.choice(PROPS), rng.randbytes(rng.randint(0, 500)),
                    headers=rng.choice([None, {}, {"a": 1, "b": b"z"}, {"x-n": 1.5}]),
                    timestamp=1_000.0 + rng.random() * 10)
            for i in range(n)]


def test_the_compiled_framing_is_built_and_used_unless_turned_off() -> None:
    """`pip install` builds it (the Makefile's venv); without it every mirrored publish costs ~2 us more."""
    pure = os.environ.get("HEADRACE_PURE_PYTHON") == "1"
    assert mirror_frame.ACCELERATED is not pure
    assert (mirror_frame.frame_rows is compiled.frame_rows) is not pure
    assert (mirror_frame.frame_messages is compiled.frame_messages) is not pure


@pytest.mark.parametrize("seg_max", [1 << 40, 5_000, 1, 0])
@pytest.mark.parametrize("start", [0, 7, 1_999, 2_000, 2_500])
def test_c_and_python_frame_rows_alike(seg_max: int, start: int) -> None:
    data = rows(2_000)
    # a segment 100 bytes in, 4,000 bytes since its last index entry, last stamp 990: every
    # branch (the first record indexed, timestamps clamped up to the stamp) is taken
    state = (start, 5, 100, 4_000, 990, seg_max, 4_096)
    framed = compiled.frame_rows(data, *state)
    assert framed == mirror_frame.frame_rows_py(data, *state)
    if start < len(data):
        assert framed[2] > start  # at least one row is framed whatever the segment's size


@pytest.mark.parametrize("seg_max", [1 << 40, 5_000, 0])
@pytest.mark.parametrize("start", [0, 13, 1_000])
def test_c_and_python_frame_messages_alike(seg_max: int, start: int) -> None:
    data = messages(1_000)
    state = (start, 0, 0, 4_096, 0, seg_max, 4_096)
    framed = compiled.frame_messages(data, mirror_row, *state)
    assert framed == mirror_frame.frame_messages_py(data, mirror_row, *state)
    # and messages frame as their rows do: the inline common case makes mirror_row's row
    assert framed == mirror_frame.frame_rows_py([mirror_row(m) for m in data], *state)


@pytest.mark.parametrize("frame", [compiled.frame_rows, mirror_frame.frame_rows_py])
def test_a_field_too_long_for_its_length_is_refused(frame: mirror_frame.FrameRows) -> None:
    for bad in ([(1, "k", b"", b"", b"m" * 65_536)], [(1, "k" * 65_536, b"", b"", b"")]):
        with pytest.raises(struct.error):
            frame(bad, 0, 0, 0, 0, 0, 1 << 40, 4_096)


@pytest.mark.parametrize("bad", [[(1, 2, b"", b"", b"")], [(1, "k", "props", b"", b"")], [("t", "k", b"", b"", b"")],
                                 [1], [(1, "k", b"")]])
def test_a_malformed_row_is_a_type_error_not_a_crash_of_the_c_code(bad: list[object]) -> None:
    with pytest.raises(TypeError):
        compiled.frame_rows(bad, 0, 0, 0, 0, 0, 1 << 40, 4_096)  # type: ignore[arg-type]


def test_a_slow_row_that_raises_propagates() -> None:
    def broken(message: Message) -> MirrorRow:
        raise RuntimeError("no row for " + message.routing_key)

    with_headers = Message(1, "ex", "k", PROPS[1], b"body", headers={"a": 1}, timestamp=1.0)
    for frame in (compiled.frame_messages, mirror_frame.frame_messages_py):
        with pytest.raises(RuntimeError, match="no row for k"):
            frame([with_headers], broken, 0, 0, 0, 0, 0, 1 << 40, 4_096)


def test_a_log_written_from_messages_reads_back_what_was_published(tmp_path: Path) -> None:
    data = messages(600)
    log = MirrorLog(tmp_path, "/", "ex", segment_max_bytes=20_000)
    log.recover()
    assert log.append_messages(data[:350], mirror_row) == (0, 349)
    assert log.append_messages(data[350:], mirror_row) == (350, 599)
    log.close()
    segments = list_segments(tmp_path, "/", "ex")
    assert len(segments) > 3  # it rolled, mid-batch too
    entries = [entry for segment in segments for entry in read_entries(segment)]
    assert [e.offset for e in entries] == list(range(600))
    for entry, message in zip(entries, data):
        ts, key, props, body, _ = mirror_row(message)
        assert (entry.routing_key, entry.props_raw, entry.body) == (key, props, body)
        assert entry.timestamp_ms >= ts
    with_headers = next(e for e, m in zip(entries, data) if m.headers)
    assert with_headers.headers is not None


def test_pure_python_mode_writes_the_same_log(tmp_path: Path) -> None:
    """HEADRACE_PURE_PYTHON=1 turns the C framing off; the log it writes is byte for byte the same."""
    script = """
import sys
from dataclasses import dataclass
from pathlib import Path
from headrace.persistence import _mirror_frame as compiled
from headrace.persistence import mirror_frame
from headrace.persistence.mirror_log import MirrorLog
sys.path.insert(0, sys.argv[2])
from test_persistence_mirror_frame import messages, rows
from headrace.server.broker.outbox import mirror_row
log = MirrorLog(Path(sys.argv[1]), "/", "ex", segment_max_bytes=50_000)
log.recover()
log.append_messages(messages(400), mirror_row)
log.append_rows(rows(300))
log.close()
print(mirror_frame.ACCELERATED)
"""
    here = str(Path(__file__).parent)
    for mode, root in (("0", tmp_path / "c"), ("1", tmp_path / "py")):
        env = dict(os.environ, HEADRACE_PURE_PYTHON=mode)
        out = subprocess.run([sys.executable, "-c", script, str(root), here], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == ("True" if mode == "0" else "False")
    written = {p.relative_to(tmp_path / "c"): p.read_bytes() for p in sorted((tmp_path / "c").rglob("*.*"))}
    assert len(written) > 4
    assert written == {p.relative_to(tmp_path / "py"): p.read_bytes() for p in sorted((tmp_path / "py").rglob("*.*"))}


class Upper(Message):
    """A Message whose routing key reads differently from its slot: the C framing must ask for it."""

    __slots__ = ()

    @property  # type: ignore[override]
    def routing_key(self) -> str:
        return "UP." + self.exchange

    @routing_key.setter
    def routing_key(self, value: str) -> None:
        pass  # the dataclass __init__ sets it; the slot stays empty


@dataclass
class Plain:
    """Not a Message at all, with the same attributes (in a __dict__, not slots)."""

    timestamp: float
    routing_key: str
    props_raw: bytes
    body: bytes
    headers: dict[str, object] | None = None


@pytest.mark.parametrize("first", ["message", "upper", "plain"])
def test_objects_of_other_classes_are_read_by_attribute(first: str) -> None:
    """The C framing reads a Message's slots directly, resolved from the first item's class; any other
    class in the same batch, first or not, is read the way Python reads it."""
    base = messages(30)
    upper = Upper(99, "ex", "ignored", PROPS[1], b"upper", timestamp=1_003.5)
    plain = Plain(1_004.25, "plain.key", PROPS[2], b"plain")
    head = {"message": base[0], "upper": upper, "plain": plain}[first]
    batch = [head, *base[1:10], upper, plain, *base[10:]]
    state = (0, 0, 0, 4_096, 0, 1 << 40, 4_096)
    framed = compiled.frame_messages(batch, mirror_row, *state)  # type: ignore[arg-type]
    assert framed == mirror_frame.frame_messages_py(batch, mirror_row, *state)  # type: ignore[arg-type]
    assert b"UP.ex" in framed[0] and b"plain.key" in framed[0] and b"ignored" not in framed[0]


@pytest.mark.parametrize("frame", [compiled.frame_messages, mirror_frame.frame_messages_py])
def test_a_timestamp_that_is_not_finite_is_a_value_error(frame: mirror_frame.FrameRows) -> None:
    for stamp in (float("nan"), float("inf")):
        message = Message(1, "ex", "k", PROPS[1], b"body", timestamp=stamp)
        with pytest.raises((ValueError, OverflowError)):
            frame([message], mirror_row, 0, 0, 0, 0, 0, 1 << 40, 4_096)  # type: ignore[call-arg]
