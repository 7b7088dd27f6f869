"""DefinitionsLog on real files: append, torn tail, compaction, migration of a definitions.json."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from headrace.persistence.definitions_log import HEADER, DefinitionsLog, encode_record


def queue(name: str, vhost: str = "/") -> dict:
    return {"name": name, "vhost": vhost, "durable": True, "auto_delete": False, "arguments": {}}


def binding(source: str, queue_name: str, key: str = "k", vhost: str = "/") -> dict:
    return {"source": source, "vhost": vhost, "destination": queue_name, "destination_type": "queue",
            "routing_key": key, "arguments": {}}


def put(section: str, entry: dict) -> dict:
    return {"op": "put", "section": section, "entry": entry}


def delete(section: str, *key: str) -> dict:
    return {"op": "del", "section": section, "key": list(key)}


def fresh(tmp_path: Path, **kw: int) -> DefinitionsLog:
    log = DefinitionsLog(tmp_path, **kw)
    assert log.load() is None
    log.compact({"vhosts": [{"name": "/"}]})
    return log


def names(doc: dict, section: str) -> list[str]:
    return [e["name"] for e in doc[section]]


def test_appended_records_are_loaded_back_after_the_snapshot(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue("a")), put("queues", queue("b"))])
    log.append([delete("queues", "/", "a"), put("exchanges", {"name": "x", "vhost": "/", "type": "direct"})])
    log.close()
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None
    assert names(doc, "vhosts") == ["/"]
    assert names(doc, "queues") == ["b"]
    assert names(doc, "exchanges") == ["x"]


def test_a_change_appends_one_record_not_the_document(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue(f"q{i}")) for i in range(2000)])
    size = log.path.stat().st_size
    log.append([put("queues", queue("one-more"))])
    assert log.path.stat().st_size - size == len(encode_record(put("queues", queue("one-more"))))


def test_a_torn_tail_is_cut_back_to_the_last_whole_record(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue("a"))])
    log.append([put("queues", queue("b"))])
    whole = log.path.stat().st_size
    log.append([put("queues", queue("c"))])
    log.close()
    with open(log.path, "r+b") as f:  # kill -9 halfway through the third record
        f.truncate(whole + 11)
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == ["a", "b"]
    assert log.path.stat().st_size == whole
    again = DefinitionsLog(tmp_path)  # what is appended next follows a whole record
    again.load()
    again.append([put("queues", queue("d"))])
    again.close()
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == ["a", "b", "d"]


def test_a_record_with_a_wrong_checksum_ends_the_log(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue("a"))])
    second = log.path.stat().st_size
    log.append([put("queues", queue("b")), put("queues", queue("c"))])
    log.close()
    data = bytearray(log.path.read_bytes())
    data[second + 12] ^= 0xFF  # a flipped byte in the payload of "b"
    log.path.write_bytes(bytes(data))
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == ["a"]
    assert log.path.stat().st_size == second


def test_a_header_torn_at_creation_is_an_empty_log(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue("a"))])
    log.close()
    log.path.write_bytes(log.path.read_bytes()[:HEADER.size - 3])
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == []


def test_the_log_is_compacted_past_its_bound_into_the_snapshot(tmp_path: Path) -> None:
    log = fresh(tmp_path, compact_min_bytes=4096)
    generation = log.generation
    for i in range(200):
        log.append([put("queues", queue(f"q{i}"))])
        if i % 2:
            log.append([delete("queues", "/", f"q{i - 1}")])
    assert log.generation > generation
    # bounded by the larger of the bound and the snapshot, not 300 records long
    snapshot_size = (tmp_path / "definitions.json").stat().st_size
    assert log.path.stat().st_size - HEADER.size <= max(4096, snapshot_size)
    assert log.bytes_written < 4 * (snapshot_size + 300 * len(encode_record(put("queues", queue("q100")))))
    snapshot = json.loads((tmp_path / "definitions.json").read_text())
    assert snapshot["headrace_log_generation"] == log.generation
    log.close()
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == [f"q{i}" for i in range(1, 200, 2)]


def test_a_log_older_than_the_snapshot_is_not_replayed(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("queues", queue("a")), put("queues", queue("gone"))])
    stale = log.path.read_bytes()
    log.append([delete("queues", "/", "gone")])
    log.compact()  # crash after the new snapshot, before the new log replaced the old one:
    log.close()
    log.path.write_bytes(stale)
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == ["a"]


def test_an_older_definitions_json_is_migrated_on_start(tmp_path: Path) -> None:
    old = {"product_name": "headrace", "product_version": "0.1.0", "vhosts": [{"name": "/"}, {"name": "v"}],
           "users": [{"name": "guest", "password_hash": "", "tags": ["administrator"]}],
           "queues": [queue("q", "v")], "bindings": [binding("amq.direct", "q", vhost="v")]}
    (tmp_path / "definitions.json").write_text(json.dumps(old, indent=1))
    log = DefinitionsLog(tmp_path)
    doc = log.load()
    assert doc is not None
    for key, value in old.items():
        assert doc[key] == value
    log.compact(doc)
    log.append([put("queues", queue("r", "v"))])
    log.close()
    assert struct.unpack_from("<8s", log.path.read_bytes())[0] == b"HRDEFLG1"
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and names(doc, "queues") == ["q", "r"] and doc["users"] == old["users"]


def test_deletions_take_along_what_hangs_off_the_object(tmp_path: Path) -> None:
    log = fresh(tmp_path)
    log.append([put("vhosts", {"name": "v"}), put("users", {"name": "u"}),
                put("permissions", {"user": "u", "vhost": "v", "configure": ".*", "write": ".*", "read": ".*"}),
                put("permissions", {"user": "u", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}),
                put("exchanges", {"name": "x", "vhost": "/", "type": "direct"}),
                put("mirrors", {"vhost": "/", "exchange": "x", "max_age_ms": None, "max_bytes": None}),
                put("queues", queue("q")), put("queues", queue("q2")), put("queues", queue("vq", "v")),
                put("bindings", binding("x", "q")), put("bindings", binding("x", "q2")),
                put("bindings", binding("amq.topic", "q2", "other")),
                put("policies", {"vhost": "v", "name": "p", "pattern": ".*", "definition": {}})])
    log.append([delete("queues", "/", "q")])
    doc = log.model.to_doc()
    assert [(b["source"], b["destination"]) for b in doc["bindings"]] == [("x", "q2"), ("amq.topic", "q2")]
    log.append([delete("exchanges", "/", "x")])
    doc = log.model.to_doc()
    assert [(b["source"], b["destination"]) for b in doc["bindings"]] == [("amq.topic", "q2")]
    assert doc["mirrors"] == []
    log.append([delete("vhosts", "v")])
    doc = log.model.to_doc()
    assert names(doc, "queues") == ["q2"] and doc["policies"] == []
    assert [p["vhost"] for p in doc["permissions"]] == ["/"]
    log.append([delete("users", "u")])
    log.close()
    doc = DefinitionsLog(tmp_path).load()
    assert doc is not None and doc["permissions"] == [] and names(doc, "queues") == ["q2"]
