"""The disk side of the broker, assembled: the message store with its flusher, the spill files
with their pager, the mirror logs with their writer, recovery at start, and the disk alarm's
watch that all of them report their writes to.

Rule 1 (go-diskqueue's ioLoop rule): one task owns each set of files: ``Flusher`` the
``MessageStore`` (flusher.py) and, through the ``DefinitionsWriter`` (definitions_writer.py), the
definitions log, ``MirrorWriter`` the ``MirrorLog``s (mirror_writer.py), ``Pager`` the spill reads
(pager.py); ``recover`` (recovery.py) and the definitions' load run before any of them starts.
Rule 2: blocking calls (write+fsync, page-in reads) run in worker threads.
Rule 3: a full disk never stops the broker: each owner keeps what it could not write, reports the
failure to the ``DiskWatch`` (the disk alarm stays up) and retries until it is written.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Hashable
from pathlib import Path

import trio

from headrace.persistence import FsyncMode, MessageStore
from headrace.persistence.dedup_journal import DedupJournal
from headrace.persistence.definitions_log import DefinitionsLog
from headrace.persistence.spill_store import SpillStore
from headrace.queues.backing import Backing
from headrace.server.broker import Broker
from headrace.server.broker.policies import trim_recovered
from headrace.server.config import Settings

from .alarms import DiskWatch
from .definitions_writer import DefinitionsWriter
from .flusher import Flusher
from .gate import Gate
from .mirror_writer import MirrorWriter
from .tier_uploader import TierUploader
from .pager import Pager
from .recovery import recover
from .stream_writer import StreamWriter

__all__ = ["Storage"]

log = logging.getLogger("headrace.storage")


class Storage:
    def __init__(self, data_dir: Path, settings: Settings, *, after_group: Callable[[], None]) -> None:
        """``after_group``: called after each store group (the app's ``Sender.flush``). The storage is
        built before the broker, so the broker's ports can name its flusher and mirror writer."""
        self.settings = settings
        self.disk = DiskWatch(data_dir, settings.limits.disk_free_limit)
        self.store = MessageStore(data_dir / "store", segment_max_bytes=settings.storage.segment_max_bytes,
                                  fsync=FsyncMode(settings.storage.fsync),
                                  checkpoint_min_bytes=settings.storage.checkpoint_min_bytes)
        # its page-in wants go to the pager, made just below (``_page_wanted`` forwards)
        self.spill = SpillStore(data_dir / "spill", report=self.disk, on_page_wanted=self._page_wanted)
        self.delayed_dir = data_dir / "delayed"  # delayed exchanges' bucket files: a cache, wiped here
        shutil.rmtree(self.delayed_dir, ignore_errors=True)
        self.streams = StreamWriter(data_dir, settings.storage.fsync != "off")
        self.flusher = Flusher(self.store, self.disk, settings, self.streams, after_group)
        self.pager = Pager(self.spill, self.disk)
        self.mirror_writer = MirrorWriter(data_dir, self.disk, settings)
        self.tier = TierUploader(data_dir, settings)
        self.flusher.dedup = self.dedup = DedupJournal(data_dir / "dedup")
        # the durable definitions: loaded and compacted by the app at start, then written by the flusher
        self.definitions = DefinitionsWriter(DefinitionsLog(data_dir, compact_min_bytes=settings.storage.definitions_log_min_bytes),
                                             self.disk, self.flusher.kick, sync=settings.storage.fsync != "off")
        self.flusher.definitions = self.definitions

    def _page_wanted(self, key: Hashable) -> None:
        self.pager.wake(key)

    def spill_factory(self, vhost: str, queue: str) -> Backing:
        return self.spill.backing(f"{vhost}\x00{queue}", (vhost, queue))

    def recover(self, broker: Broker) -> None:
        recover(self.store, broker, time.time())
        for vhost in broker.vhosts.values():
            trim_recovered(broker.delivery, vhost, time.time())  # a lower limit applies at once (policies.py)
        dedup = broker.delivery.dedup
        dedup.restore(self.dedup.load())  # publish dedup windows (server/broker/dedup.py)
        dedup.keep_only(lambda kind, vhost, name: (v := broker.vhosts.get(vhost)) is not None
                        and name in (v.exchanges if kind == "exchange" else v.queues))
        self.dedup.rewrite(dedup.snapshot(time.time()))  # compacted, torn tail gone
        self.streams.recover(broker)

    async def start(self, nursery: trio.Nursery, broker: Broker, gate: Gate) -> None:
        self.disk.broker, self.disk.gate = broker, gate
        nursery.start_soon(self.flusher.run, broker, gate)
        nursery.start_soon(self.mirror_writer.run, broker, gate)
        nursery.start_soon(self.tier.run, broker)
        nursery.start_soon(self.pager.run, broker)

    async def drain(self, broker: Broker) -> None:
        """Shutdown: what the outboxes hold goes to disk."""
        await self.flusher.drain(broker)
        self.flusher.journal_dedup(broker)
        await self.mirror_writer.write(broker)

    def close(self) -> None:
        self.flusher.close()
        try:
            self.store.close()
        except OSError as exc:
            log.error("message store: records not written at shutdown (%s); none was confirmed", exc)
        self.spill.close()
        self.mirror_writer.close()
        self.streams.close()
        self.dedup.close()
        self.definitions.close()
