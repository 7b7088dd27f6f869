"""DefinitionsStore: atomic, durable save and strict load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace.persistence import DefinitionsError, DefinitionsStore

DEFS = {
    "vhosts": [{"name": "/"}],
    "queues": [{"vhost": "/", "name": "q", "durable": True, "arguments": {"x-max-length": 10}}],
    "users": [{"name": "guest", "tags": ["administrator"]}],
}


def test_nothing_saved_loads_as_none(tmp_path: Path) -> None:
    assert DefinitionsStore(tmp_path / "definitions.json").load() is None


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "nested" / "definitions.json")
    store.save(DEFS)
    assert DefinitionsStore(store.path).load() == DEFS


def test_save_replaces_the_whole_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "definitions.json")
    store.save({"queues": [{"name": "x" * 10_000}]})
    store.save({"queues": []})
    assert store.load() == {"queues": []}
    assert [p.name for p in tmp_path.iterdir()] == ["definitions.json"]


def test_a_torn_temp_file_from_a_crash_does_not_affect_load(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "definitions.json")
    store.save(DEFS)
    (tmp_path / "definitions.json.tmp").write_bytes(b'{"vhosts": [')  # crash mid-save
    assert store.load() == DEFS
    store.save({"vhosts": []})
    assert store.load() == {"vhosts": []}


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"\xff\xfe not utf-8", b"[1, 2]", b'"text"', b"null"],
    ids=["empty", "truncated", "not-utf8", "list", "string", "null"],
)
def test_corrupt_or_non_object_file_raises(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "definitions.json"
    path.write_bytes(content)
    with pytest.raises(DefinitionsError):
        DefinitionsStore(path).load()


def test_saved_file_is_private(tmp_path: Path) -> None:
    store = DefinitionsStore(tmp_path / "definitions.json")
    store.save(DEFS)  # holds password hashes
    assert os.stat(store.path).st_mode & 0o077 == 0
