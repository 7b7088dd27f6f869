"""Where a log's segments live once tiered: the upload manifest, tier URIs, and reads from a tier.

A mirror's or a stream's sealed segments may be copied to a ``pyarrow.fs`` URI (``file://`` on
shared storage, ``s3://``, ``hdfs://``), the log's *tier* (``tier.py`` uploads them). The
manifest, ``tier.manifest`` in the log's directory beside its segments, is the truth of what is
there: JSON lines, each ``{"op": "up", "base", "size", "end", "last_ts", "uri"}`` once a segment's
upload has committed, or ``{"op": "drop", "base"}`` once retention dropped it from the tier. Each
line is fsynced before anything that relies on it happens, and a torn last line (a crash while
writing it) is skipped, so the manifest never names an object that was not fully uploaded.

A segment whose local ``.log`` was deleted after its upload keeps its ``.idx`` in the directory:
readers still plan byte ranges at its index entries, so the offsets stay addressable as before,
and read the bytes from ``uri``.

Owns no state: the uploader (``tier.TierLog``, one pass at a time per log) writes the manifest;
everything here only reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from .mirror_records import SEGMENT_SUFFIX, SegmentInfo, list_segments, mirror_dir

__all__ = ["MANIFEST", "TierEntry", "all_segments", "first_offset", "load_manifest", "object_uri",
           "parent_uri", "public_uri", "read_uri", "tier_dir_uri", "tier_uri_problem"]

MANIFEST = "tier.manifest"


@dataclass(frozen=True, slots=True)
class TierEntry:
    """One committed upload: the segment's base offset, bytes, the offset after its last record,
    its last record's time, and its object's URI."""
    base: int
    size: int
    end: int
    last_ts: int | None
    uri: str


def load_manifest(directory: Path) -> dict[int, TierEntry]:
    """The segments in the tier now, by base offset (uploads less drops); a torn tail is skipped."""
    out: dict[int, TierEntry] = {}
    try:
        raw = (directory / MANIFEST).read_bytes()
    except OSError:
        return out
    for line in raw.split(b"\n"):
        try:
            doc: dict[str, Any] = json.loads(line)
            base = int(doc["base"])
            if doc["op"] == "up":
                out[base] = TierEntry(base, int(doc["size"]), int(doc["end"]), doc.get("last_ts"), str(doc["uri"]))
            elif doc["op"] == "drop":
                out.pop(base, None)
        except (ValueError, KeyError, TypeError):
            continue  # the torn last line
    return out


def tier_dir_uri(tier_uri: str, kind: str, vhost: str, name: str) -> str:
    """The log's folder under a tier URI: ``<uri>/<mirror|stream>/<vhost>/<name>`` (names quoted as
    the local layout quotes them), the URI's query (``s3://b/p?region=...``) kept at the end."""
    u = urlsplit(tier_uri)
    # quoted twice: the URI's escapes are undone once by pyarrow, leaving the local layout's
    folders = "/".join(quote(quote(part, safe=""), safe="") for part in (vhost, name))
    path = u.path.rstrip("/") + f"/{kind}/{folders}"
    return urlunsplit((u.scheme, u.netloc, path, u.query, ""))


def object_uri(directory_uri: str, file_name: str) -> str:
    u = urlsplit(directory_uri)
    return urlunsplit((u.scheme, u.netloc, u.path + "/" + file_name, u.query, ""))


def parent_uri(uri: str) -> str:
    """The folder an object's URI lies in (its query kept): ``object_uri``'s inverse."""
    u = urlsplit(uri)
    return urlunsplit((u.scheme, u.netloc, u.path.rsplit("/", 1)[0], u.query, ""))


def public_uri(uri: str) -> str:
    """The URI as logs and the HTTP API show it: without the credentials it may carry
    (``s3://KEY:SECRET@bucket/...``, pyarrow's form), which stay in the policy and the manifest.
    A reader given this URI reads the tier with its own credentials (``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY``, a profile, a role), or through the broker when it has none."""
    u = urlsplit(uri)
    if "@" not in u.netloc:
        return uri
    return urlunsplit((u.scheme, u.netloc.rpartition("@")[2], u.path, u.query, u.fragment))


def tier_uri_problem(uri: str) -> str | None:
    """What pyarrow finds wrong with a tier URI without reaching the store (an option it does not
    know, a malformed address), as its text without the credentials; None when nothing is. An
    ``s3://`` URI without a region is checked as if it had one, since pyarrow would otherwise ask
    the network for the bucket's; ``hdfs://`` needs libhdfs even to be parsed and is not checked.
    Whether the store answers is the uploader's to find out (it logs what fails)."""
    from pyarrow import fs

    u = urlsplit(uri)
    if u.scheme in ("hdfs", "viewfs"):
        return None
    probe = uri
    if u.scheme == "s3" and "region=" not in u.query:
        probe = urlunsplit(u._replace(query="&".join(q for q in (u.query, "region=us-east-1") if q)))
    try:
        fs.FileSystem.from_uri(probe)
    except ValueError as exc:  # pyarrow's ArrowInvalid: the URI itself is wrong
        return str(exc).replace(uri, public_uri(uri)).replace(probe, public_uri(uri))
    except (OSError, NotImplementedError):  # this machine cannot reach or open it: not the URI's fault
        return None
    return None


def all_segments(root: Path, vhost: str, name: str) -> list[SegmentInfo]:
    """The log's segments in offset order, local or in its tier: a local one carries its tier
    copy's URI when it has one; one that is only in the tier has its local path (no ``.log``
    there; its ``.idx`` usually is) and the manifest's size."""
    local = list_segments(root, vhost, name)
    tiered = load_manifest(mirror_dir(root, vhost, name))
    if not tiered:
        return local
    out = [replace(s, tier=tiered[s.base_offset].uri) if s.base_offset in tiered else s for s in local]
    have = {s.base_offset for s in local}
    directory = mirror_dir(root, vhost, name)
    out += [SegmentInfo(directory / f"{e.base:020d}{SEGMENT_SUFFIX}", e.base, e.size, vhost, name, e.uri)
            for e in tiered.values() if e.base not in have]
    out.sort(key=lambda s: s.base_offset)
    return out


def first_offset(root: Path, vhost: str, name: str, local: list[SegmentInfo], default: int,
                 memo: dict[Path, tuple[int, int, int | None]] | None = None) -> int:
    """The log's oldest offset: its oldest local segment's, or an older one's only in the tier.
    The manifest is read only when a local listing does not start at 0 and there is one, and with
    a ``memo`` (the caller's, by manifest: its size and mtime, and its oldest base) only when it
    changed: a stream's writer asks after every write."""
    first = local[0].base_offset if local else default
    if first == 0:
        return 0
    path = mirror_dir(root, vhost, name) / MANIFEST
    try:
        stat = path.stat()
    except OSError:
        return first
    known = memo.get(path) if memo is not None else None
    if known is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
        oldest = known[2]
    else:
        tiered = load_manifest(path.parent)
        oldest = min(tiered) if tiered else None
        if memo is not None:
            memo[path] = (stat.st_size, stat.st_mtime_ns, oldest)
    return first if oldest is None else min(first, oldest)


def read_uri(uri: str, start: int, stop: int | None) -> bytes:
    """Bytes ``start``..``stop`` (None: to the end) of an object in a tier; OSError when it cannot
    be read from here (no such path on this machine, no credentials, unreachable)."""
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    with filesystem.open_input_file(path) as f:
        end = f.size() if stop is None else min(stop, f.size())
        return bytes(f.read_at(max(end - start, 0), start)) if end > start else b""
