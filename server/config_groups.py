"""The groups of ``Settings`` (server/config.py): one pydantic model per part of the broker that
reads them, so a reader names its part (``settings.storage.fsync``) and a group's checks see only
its own fields.

Owner: this module owns each setting's type, default and bounds; ``config.py`` owns where the values
come from (flags, environment, TOML) and which group a flat name belongs to (``GROUPS``). Every field
name is unique across the groups: the flat names ``HEADRACE_AMQP_PORT`` / ``amqp_port = ...`` of the
single flat model this replaced still name one field each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["AuthSettings", "ClusterSettings", "CompatSettings", "HttpSettings", "LimitsSettings",
           "NetworkSettings", "SparkSettings", "StorageSettings", "MiB", "RABBITMQ_COMPAT"]

MiB = 1024 * 1024
# bound on the samples one level of the rate history keeps per object (memory per object)
STATS_ROWS_MAX = 2000


class _Group(BaseModel):
    # an unknown key in a group's TOML table or nested environment variable is an error, not ignored
    model_config = ConfigDict(extra="forbid", validate_default=True)


class NetworkSettings(_Group):
    """The AMQP listeners, TLS, what connection.tune offers, and what a paused reader lets in."""

    amqp_host: str = "127.0.0.1"
    amqp_port: int = Field(5672, ge=0, le=65535)
    amqps_port: int | None = Field(None, ge=0, le=65535)  # RabbitMQ's default is 5671
    # where the ports actually bound are written (useful with port 0); None = not written
    ports_file: Path | None = None
    # TLS (amqps, and https in the http group); enabled when a certificate and key are given
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    tls_cafile: Path | None = None  # CA bundle for client certificates
    tls_verify_peer: bool = False  # require a client certificate signed by tls_cafile

    # What a publisher can have in flight in TCP in front of a reader the broker paused (ARCHITECTURE.md,
    # "Backpressure"; server/net/socket_bounds.py; benchmarks/RESULTS.md, "Bounded windows by
    # default"). amqp_mss is set on the AMQP listeners, so it applies from the SYN-ACK on: the largest
    # segment either side sends (0 = the route's: 64 KiB on loopback, 1448 on Ethernet). Linux sizes a
    # client's send buffer as 2 (cubic) or 3 (BBR) x its congestion window (in segments) x a segment's
    # kernel buffer (the MSS plus ~0.5 KiB, rounded up to a power of two): loopback's 64 KiB segments
    # make that 3.9 MB at the least, 7300 about 1 MB, as Ethernet's 1448 does, without 1448's
    # per-packet cost (a third of publish-only throughput).
    # amqp_rcvbuf is the receive buffer (bytes, the kernel doubles it; 0 = Linux's autotuning) each
    # accepted connection gets at once, except one whose handshake round trip is
    # amqp_rcvbuf_long_link_rtt seconds or more (0 = no exception), which keeps the autotuned window.
    # A small window needs a segment that fits it: a window under one segment stalls the connection.
    # Why 16 KiB and not less: with 8 KiB (the kernel's 16) a window holds two 7300-byte segments, and
    # the kernel's accounting of what they cost overflows it: segments dropped, a 200 ms retransmission
    # timeout, and 64 KiB messages at a quarter of the speed. The window grows for a connection no
    # saturated queue holds (socket_bounds.Window, up to socket_bounds.RCVBUF_MAX).
    # With these defaults saturated pubsub (2 pika publishers, 2 consumers, loopback) waits p50/p99
    # ~0.11/0.18 s with BBR clients and ~0.06/0.37 s with cubic ones, against 0.37/0.53 and
    # 0.13/0.34 s with Linux's own sizing (amqp_rcvbuf 0, amqp_mss 0, saturation_ready 1000,
    # saturation_resume_ready 250): the trade a deployment may still make the other way.
    amqp_rcvbuf: int = Field(16384, ge=0)
    amqp_rcvbuf_long_link_rtt: float = Field(0.002, ge=0)
    amqp_mss: int = Field(7300, ge=0, le=32767)
    # a queue with consumers holds its publishers at this many ready messages and releases them once
    # it is down to saturation_resume_ready (broker/saturation.py): 100 messages are 3-5 ms at the
    # 20-35k msg/s two pika consumers take, and one resumed read of a small window brings about as
    # many. 500/150 measured saturated p50 ~10% higher at the same throughput.
    saturation_ready: int = Field(100, ge=1)
    saturation_resume_ready: int = Field(30, ge=0)

    # what connection.tune offers
    heartbeat: int = Field(60, ge=0, le=65535)
    frame_max: int = Field(131072, ge=4096, le=1 << 24)
    channel_max: int = Field(2047, ge=1, le=65535)
    # a socket must send the protocol header within header_timeout of connecting and finish the
    # handshake (up to connection.open) within handshake_timeout (RabbitMQ: 10 s)
    header_timeout: float = Field(3.0, gt=0)
    handshake_timeout: float = Field(10.0, gt=0)

    @field_validator("amqp_mss")
    @classmethod
    def _mss_in_range(cls, v: int) -> int:
        if 0 < v < 88:
            raise ValueError("amqp_mss must be 0 (the route's) or at least 88 (the kernel's minimum segment)")
        return v

    @model_validator(mode="after")
    def _small_windows_need_small_segments(self) -> NetworkSettings:
        window = self.amqp_rcvbuf
        if window and not 0 < self.amqp_mss <= window:
            raise ValueError(f"amqp_rcvbuf ({window}) needs amqp_mss between 88 and {window} (it is "
                             f"{self.amqp_mss}; 0 is the route's, 64 KiB on loopback): a window smaller "
                             "than a segment stalls the connection; or set amqp_rcvbuf to 0 for Linux's "
                             "own sizing")
        return self

    @model_validator(mode="after")
    def _resume_below_bound(self) -> NetworkSettings:
        if self.saturation_resume_ready >= self.saturation_ready:
            raise ValueError(f"saturation_resume_ready ({self.saturation_resume_ready}) must be below "
                             f"saturation_ready ({self.saturation_ready})")
        return self


class HttpSettings(_Group):
    """The management API's listeners and bounds, and the metrics endpoints."""

    http_host: str = "127.0.0.1"
    http_port: int = Field(15672, ge=0, le=65535)
    http_enabled: bool = True
    https_port: int | None = Field(None, ge=0, le=65535)  # with network.tls_certfile and tls_keyfile
    http_max_body: int = Field(16 * MiB, ge=1024)
    # bound on an HTTP request head (request line + headers); larger heads are answered 431
    http_max_header_bytes: int = Field(16 * 1024, ge=1024, le=1 * MiB)
    # an HTTP request must arrive whole within this time; idle keep-alive connections close after it
    http_request_timeout: float = Field(15.0, gt=0)
    # what GET /metrics (Prometheus text, no credentials) tells: "off" = not served (404),
    # "aggregate" = totals per vhost without queue names, "per-queue" = every queue by name
    metrics: Literal["off", "aggregate", "per-queue"] = "off"
    # the rabbitmq_prometheus plugin's endpoint (RabbitMQ's metric names, no credentials) on this
    # port of http_host: /metrics (node-wide totals) and /metrics/per-object (every queue by
    # name). None = not listening, as the plugin is off until enabled; the plugin's port is 15692
    prometheus_port: int | None = Field(None, ge=0, le=65535)
    # the rate history's levels, RabbitMQ's sample_retention_policies: [max age, interval] in
    # seconds, finest first; "global" for the overview, vhosts and the node, "basic" for queues,
    # exchanges, connections and channels. The sampler ticks at the finest interval of the two,
    # and every interval is a multiple of it (docs/http-api.md, "Rates and their history")
    stats_retention_global: list[tuple[int, int]] = [(605, 5), (3660, 60), (29400, 600), (86400, 1800)]
    stats_retention_basic: list[tuple[int, int]] = [(605, 5), (3600, 60)]

    @model_validator(mode="after")
    def _retention_levels(self) -> HttpSettings:
        levels = {"stats_retention_global": self.stats_retention_global,
                  "stats_retention_basic": self.stats_retention_basic}
        for name, policy in levels.items():
            if not policy:
                raise ValueError(f"{name}: at least one [max age, interval] level")
            for age, interval in policy:
                if not 0 < interval <= age or age // interval > STATS_ROWS_MAX:
                    raise ValueError(f"{name}: [{age}, {interval}]: the interval must be positive, at most the age, "
                                     f"and keep at most {STATS_ROWS_MAX} samples")
        tick = min(i for policy in levels.values() for _, i in policy)
        for name, policy in levels.items():
            for _, interval in policy:
                if interval % tick:
                    raise ValueError(f"{name}: interval {interval} is not a multiple of the finest ({tick})")
            if [i for _, i in policy] != sorted({i for _, i in policy}):
                raise ValueError(f"{name}: the levels go from the finest interval to the coarsest")
        return self


class StorageSettings(_Group):
    """The data directory, the message store's group commit, and what queues keep in memory."""

    data_dir: Path = Path("headrace-data")
    fsync: Literal["batch", "always", "off"] = "batch"
    # the flusher takes at most this many records per write+fsync group
    fsync_batch_max: int = Field(4096, ge=1)
    # how long the flusher may wait after the first pending record to gather a bigger group (ms);
    # 0 = flush as soon as the event loop is idle. The loop's timers wait in whole milliseconds
    # (epoll), so any window under 1 ms waits about 1 ms. Kept as a setting: on an idle machine any
    # window lowered confirms, on a contended one 1 ms traded a ~25% higher confirm p50 for about
    # as many confirms or more (benchmarks/RESULTS.md, "A faster VM" and "Settings in groups")
    fsync_window_ms: float = Field(0.0, ge=0, le=1000)
    # a group fsync runs on the event loop while fsyncs average below this (ms), else in a thread;
    # 0 = always in a thread
    fsync_inline_below_ms: float = Field(1.0, ge=0)
    segment_max_bytes: int = Field(32 * MiB, ge=4096)
    # x-delayed-message exchanges read at most this much back from their bucket files per clock
    # tick (server/broker/delayed.py): what memory holds of messages that came due all at once,
    # such as those due while the broker was down
    delayed_read_bytes: int = Field(4 * MiB, ge=4096)
    # the message store writes its index checkpoint once at least this much log (and twice the
    # last checkpoint's size) was written since the previous one (persistence/store_checkpoint.py)
    checkpoint_min_bytes: int = Field(64 * MiB, ge=0)
    # the definitions log is compacted into a new snapshot once it is larger than this and than the
    # snapshot (persistence/definitions_log.py)
    definitions_log_min_bytes: int = Field(1 * MiB, ge=4096)
    # memory bounds per queue: beyond these, entries are spilled to disk
    queue_max_resident_messages: int = Field(50_000, ge=16)
    queue_max_resident_bytes: int = Field(64 * MiB, ge=4096)


class SparkSettings(_Group):
    """The mirror log the Spark bridge reads (persistence/mirror_log.py)."""

    # segment size (retention drops whole segments) and how often retention runs, also while a
    # mirror is idle (seconds)
    mirror_segment_max_bytes: int = Field(64 * MiB, ge=4096)
    mirror_retention_interval: float = Field(10.0, gt=0)
    # a mirror log is fsynced at most this often (seconds), and when a segment rolls and at shutdown:
    # what its writer wrote survives a crash of the process (the page cache holds it), a power loss
    # can take the last interval's records; nothing waits on it (confirms cover the store, not the
    # mirror), and a sync after every batch was more than half of mirroring's cost. 0: every batch
    mirror_sync_interval: float = Field(1.0, ge=0)
    # tiered segments (policy key ``tier-uri``): how often sealed segments are looked for and
    # uploaded (seconds), and a cap on upload bytes per second (None: none), as Kafka's
    # remote.log.manager.copy.max.bytes.per.second, so an upload does not take a shared link
    tier_interval: float = Field(5.0, gt=0)
    tier_upload_max_bytes_per_second: int | None = Field(None, ge=1024)


class LimitsSettings(_Group):
    """Bounds on what clients may take (issue: hostile clients; each refusal is an AMQP/HTTP error),
    and the broker-wide memory and disk alarms."""

    max_connections: int = Field(10_000, ge=1)
    max_connections_per_user: int | None = Field(None, ge=1)
    # sockets that have not authenticated yet; at this bound a new socket is still admitted and the
    # one stuck longest (since connecting, or since its protocol header) is closed
    max_unauthenticated: int = Field(512, ge=1)
    # failed password checks allowed per second (burst 20) before logins that would need a hash are
    # refused at once: each check costs ~50 ms of PBKDF2 on the event loop
    failed_logins_per_second: float = Field(10.0, gt=0)
    max_queues_per_vhost: int = Field(100_000, ge=1)
    max_exchanges_per_vhost: int = Field(100_000, ge=1)
    # None: the rabbitmq_compat release's default (3.10: 128 MiB; 4.0 and later: 16 MiB)
    max_message_size: int | None = Field(None, ge=1, le=512 * MiB)
    # bytes of uncommitted publishes one transactional channel may hold (beyond: 406 on the channel)
    max_tx_bytes: int = Field(64 * MiB, ge=1)
    # persistent publishes a connection may have waiting for fsync before it stops being read
    max_unconfirmed_per_connection: int = Field(10_000, ge=1)
    # close a channel that holds one delivery unacked for longer than this (RabbitMQ: 30 min)
    consumer_timeout_ms: int | None = Field(1_800_000, ge=1)
    # a stream group's member demoted by a rebalance may hold unacked deliveries this long before
    # its partition goes to the new active member anyway (they come again to that member)
    stream_handover_timeout_ms: int = Field(10_000, ge=1)
    memory_high_watermark: float = Field(0.4, gt=0)  # <= 1: fraction of RAM; > 1: bytes
    # what the watermark is compared with: "held" = message bytes in memory plus unsent output (falls
    # as consumers drain, so the alarm clears); "rss" = the process's resident set, which CPython
    # rarely gives back, so an RSS alarm may stay up long after the backlog is gone
    memory_calculation_strategy: Literal["held", "rss"] = "held"
    disk_free_limit: int = Field(50 * MiB, ge=0)

    @property
    def memory_limit_bytes(self) -> int:
        if self.memory_high_watermark <= 1:
            return int(_total_memory() * self.memory_high_watermark)
        return int(self.memory_high_watermark)


# the RabbitMQ releases whose semantics the broker can follow (docs/compat.md says what each changes)
RABBITMQ_COMPAT = ("3.10", "4.0", "4.1", "4.2", "4.3")


class CompatSettings(_Group):
    """Which RabbitMQ release's semantics the broker follows where 4.x changed 3.10's: defaults
    (a quorum queue's delivery limit, the largest message) and rules (what a nack counts, what a
    consumer timeout does). 3.10 stays the default, so clients written against it see no change."""

    rabbitmq_compat: Literal["3.10", "4.0", "4.1", "4.2", "4.3"] = "3.10"


class AuthSettings(_Group):
    """The users and vhost a first run creates, and where users may connect from."""

    default_vhost: str = "/"
    default_user: str = "guest"
    default_pass: str = "guest"
    # users that may only connect from loopback addresses (RabbitMQ's loopback_users)
    loopback_users: list[str] = ["guest"]
    # first run: an administrator besides (or instead of) guest
    admin_user: str | None = None
    admin_pass: str | None = None

    @field_validator("default_vhost")
    @classmethod
    def _vhost_not_empty(cls, v: str) -> str:
        if not v:
            raise ValueError("default_vhost must not be empty")
        return v


class ClusterSettings(_Group):
    """The node's name and its cluster (in progress, ARCHITECTURE.md "Cluster (in progress)"): with
    no etcd endpoints the broker is standalone, as before, and nothing else here is read."""

    node_name: str = Field("headrace@localhost", min_length=1, max_length=255)
    cluster_etcd_endpoints: str = ""  # comma-separated etcd client URLs, e.g. http://127.0.0.1:2379
    cluster_id: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # etcd keys: /headrace/<id>/
    cluster_port: int = Field(25672, ge=0, le=65535)  # the replication listener (RabbitMQ's inter-node port)
    # the address the other nodes reach this node at (its AMQP, HTTP and replication ports); empty:
    # amqp_host, or 127.0.0.1 when that is a wildcard address
    cluster_host: str = Field("", max_length=255)
    cluster_lease_ttl_s: int = Field(5, ge=2, le=60)  # a dead leader's lease expires after this
    cluster_min_in_sync: int | None = Field(None, ge=1)  # copies on disk before a confirm; None = a majority
    # a follower that has not acked what the leader had this long ago leaves the in-sync set
    cluster_lag_timeout_s: float = Field(1.5, gt=0, le=60)

    @field_validator("cluster_etcd_endpoints")
    @classmethod
    def _endpoints_are_urls(cls, v: str) -> str:
        for url in (u.strip() for u in v.split(",") if u.strip()):
            if not url.startswith(("http://", "https://")) or len(url.split("//", 1)[1].strip("/")) == 0:
                raise ValueError(f"cluster_etcd_endpoints: {url!r} is not an http(s)://host:port URL")
        return v

    @property
    def etcd_endpoints(self) -> list[str]:
        return [u.strip() for u in self.cluster_etcd_endpoints.split(",") if u.strip()]


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 * 1024 * MiB
