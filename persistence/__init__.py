"""Blocking file I/O for the broker: the durable message store, spill files for transient overflow,
the definitions file, and the shared record framing. No trio here; the shell calls in through
worker threads."""

from .definitions import DefinitionsError, DefinitionsStore
from .fsync import FsyncMode, fsync_dir, fsync_file
from .message_store import DEFAULT_SEGMENT_MAX_BYTES, MessageStore, StoreNotOpenError
from .records import Record, ScanResult, encode_record, iter_records, scan_bytes
from .spill import SpillBacking, SpillClosedError, SpillCorruptError
from .spill_store import SpillStore
from .store_ops import (
    Ack,
    Delay,
    Deliver,
    DropQueue,
    Publish,
    PurgeQueue,
    Recovered,
    RecoveredMessage,
    StoreOp,
    Undelay,
)

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "Ack",
    "DefinitionsError",
    "DefinitionsStore",
    "Delay",
    "Deliver",
    "DropQueue",
    "FsyncMode",
    "MessageStore",
    "Publish",
    "PurgeQueue",
    "Record",
    "Recovered",
    "RecoveredMessage",
    "ScanResult",
    "SpillBacking",
    "SpillClosedError",
    "SpillCorruptError",
    "SpillStore",
    "StoreNotOpenError",
    "StoreOp",
    "Undelay",
    "encode_record",
    "fsync_dir",
    "fsync_file",
    "iter_records",
    "scan_bytes",
]
