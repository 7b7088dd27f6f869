"""The tier uploader: copies the sealed segments of mirrored exchanges' and streams' logs to the
tier their policy names (``tier-uri``), off the event loop.

Owner: this task alone writes the logs' upload manifests and deletes local copies of uploaded
segments (``persistence/tier.py``, one pass at a time in a worker thread); the logs' writers
(``MirrorWriter``, ``StreamWriter``) still own their active segments and their own retention,
which never touches a sealed segment's tier copy.

Every ``tier_interval`` seconds it reads, on the event loop, which logs have a tier and with
which retention (the policy's ``tier-uri`` and ``tier-local-max-bytes``, the mirror's or the
stream's retention), then runs a pass over each in a worker thread: a slow upload (a big segment,
a remote store, ``tier_upload_max_bytes_per_second``) never holds the event loop. A failing tier
(unreachable, no credentials) is logged once per log until it works again; the log stays local.

Each pass first removes the tiers of deleted streams (their drop notes, ``tier.run_drops``): this
task being the only one to write or delete tier objects, a removal never races an upload.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import trio

from headrace.persistence.mirror_log import Retention
from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier import DROPS, TierSettings, run_drops, tier_pass
from headrace.persistence.tier_manifest import public_uri
from headrace.server.broker import Broker
from headrace.server.broker.policies import stream_arguments
from headrace.server.broker.queue_types import parse_interval_ms
from headrace.server.broker.stream_queue import StreamQueue
from headrace.server.config import Settings

__all__ = ["TierUploader"]

log = logging.getLogger("headrace.tier")

Target = tuple[str, Path, str, str, TierSettings]  # kind, log root, vhost, name, its tier


class TierUploader:
    def __init__(self, data_dir: Path, settings: Settings) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self._failing: set[tuple[str, str, str]] = set()  # logs whose last pass failed (logged once)

    def targets(self, broker: Broker) -> list[Target]:
        """On the event loop: every mirror and stream whose policy names a tier."""
        rate = self.settings.spark.tier_upload_max_bytes_per_second
        out: list[Target] = []
        for vname, vhost in broker.vhosts.items():
            for ename in vhost.mirrored:
                definition = broker.policies.applied(vname, "exchange", ename).definition
                if isinstance(definition.get("tier-uri"), str):
                    age, size = vhost.mirror_retention.get(ename, (None, None))
                    out.append(("mirror", self.data_dir, vname, ename, TierSettings(
                        definition["tier-uri"], definition.get("tier-local-max-bytes"), Retention(age, size), rate)))
            for qname, queue in vhost.queues.items():
                if not isinstance(queue, StreamQueue):
                    continue
                definition = broker.policies.applied(vname, "queue", qname, "stream").definition
                if not isinstance(definition.get("tier-uri"), str):
                    continue
                args = stream_arguments(queue.arguments, definition)
                age = parse_interval_ms(args.get("x-max-age")) if "x-max-age" in args else None
                size = args.get("x-max-length-bytes")
                retention = Retention(age, size if isinstance(size, int) else None)
                out.append(("stream", stream_root(self.data_dir), vname, qname, TierSettings(
                    definition["tier-uri"], definition.get("tier-local-max-bytes"), retention, rate)))
        return out

    def upload(self, targets: list[Target], now_ms: int) -> None:
        """In a worker thread: the deleted logs' tiers removed, then one pass over each log."""
        try:
            for folder in run_drops(self.data_dir):
                log.info("tier %s removed with its log", public_uri(folder))
        except (OSError, ValueError) as exc:  # ValueError: pyarrow's ArrowInvalid (a URI it cannot use)
            log.warning("a deleted log's tier not removed yet: %s", exc)
        for kind, root, vhost, name, tier in targets:
            key, shown = (kind, vhost, name), public_uri(tier.uri)  # logged without its credentials
            try:
                report = tier_pass(root, kind, vhost, name, tier, now_ms)
            except (OSError, ValueError) as exc:  # pyarrow: OSError subclasses, ArrowInvalid for a bad URI
                if key not in self._failing:
                    log.warning("%s %s/%s: tier %s not written: %s", kind, vhost, name, shown,
                                str(exc).replace(tier.uri, shown))
                self._failing.add(key)
                continue
            if key in self._failing:
                self._failing.discard(key)
                log.info("%s %s/%s: tier %s written again", kind, vhost, name, shown)
            if report.uploaded or report.recorded or report.local_deleted or report.dropped:
                log.info("%s %s/%s: %d segments uploaded to %s (%d found uploaded), %d local copies deleted, "
                         "%d dropped by retention", kind, vhost, name, len(report.uploaded), shown,
                         len(report.recorded), report.local_deleted, report.dropped)

    async def run(self, broker: Broker) -> None:
        while True:
            await trio.sleep(self.settings.spark.tier_interval)
            targets = self.targets(broker)
            if targets or (self.data_dir / DROPS).exists():
                await trio.to_thread.run_sync(self.upload, targets, int(time.time() * 1000))
