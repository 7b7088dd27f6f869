"""A stream tiered away for the tests that read one back: declared with small segments, filled
with confirmed messages, and given a policy that copies its sealed segments to a tier URI and
keeps none of them locally (the broker runs with a short ``HEADRACE_TIER_INTERVAL``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pika

from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier_manifest import all_segments

__all__ = ["SEGMENT", "offloaded", "declare_tiered_stream"]

SEGMENT = 32_768


def declare_tiered_stream(amqp_url: str, http_url: str, name: str, n: int, body: Callable[[int], bytes], tier_uri: str,
                  *, policy: str | None = None) -> None:
    """Stream ``name`` with messages ``body(0..n-1)``, confirmed, and the policy (named ``policy``,
    or after the stream) tiering it to ``tier_uri``."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream",
                                                    "x-stream-max-segment-size-bytes": SEGMENT})
    for i in range(n):
        ch.basic_publish("", name, body(i))
    conn.close()
    httpx.put(f"{http_url}/api/policies/%2F/{policy or name}", auth=("guest", "guest"), timeout=10, json={
        "pattern": f"^{name}$", "apply-to": "streams",
        "definition": {"tier-uri": tier_uri, "tier-local-max-bytes": 0}}).raise_for_status()


def offloaded(data_dir: Path, name: str, more_than: int = 3) -> bool:
    """Whether more than ``more_than`` segments are there and every sealed one is in the tier only."""
    segs = all_segments(stream_root(data_dir), "/", name)
    return len(segs) > more_than and all(s.tier and not s.path.exists() for s in segs[:-1])
