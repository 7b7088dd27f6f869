"""Every setting of a running broker, from one pydantic model.

Precedence, highest first: CLI flags (passed as init values), ``HEADRACE_*`` environment variables,
the TOML file named by ``--config`` / ``HEADRACE_CONFIG``, then these defaults (RabbitMQ's where one
exists).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

__all__ = ["Settings", "load_settings"]

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEADRACE_", extra="forbid", validate_default=True)

    # listeners
    amqp_host: str = "127.0.0.1"
    amqp_port: int = Field(5672, ge=0, le=65535)
    http_host: str = "127.0.0.1"
    http_port: int = Field(15672, ge=0, le=65535)
    http_enabled: bool = True
    # where the port actually bound is written (useful with port 0); empty = not written
    ports_file: Path | None = None

    # What a publisher can have in flight in TCP in front of a reader the broker paused (ARCHITECTURE.md,
    # "Backpressure"; server/net/socket_bounds.py; measured in benchmarks/RESULTS.md, "Bounded
    # windows by default"). amqp_mss is set on the AMQP listeners, so it applies from the SYN-ACK
    # on: the largest segment either side sends (0 = the route's: 64 KiB on loopback, 1448 on
    # Ethernet). Linux sizes a client's send buffer as 2 (cubic) or 3 (BBR) x its congestion window
    # (in segments) x a segment's kernel buffer (the MSS plus ~0.5 KiB, rounded up to a power of
    # two): loopback's 64 KiB segments make that 3.9 MB at the least, 7300 about 1 MB, as Ethernet's
    # 1448 does, without 1448's per-packet cost (a third of publish-only throughput).
    # amqp_rcvbuf is the receive buffer (bytes, the kernel doubles it; 0 = Linux's autotuning, up
    # to tcp_rmem's max) each accepted connection gets at once, except one whose handshake round
    # trip is amqp_rcvbuf_long_link_rtt seconds or more (0 = no exception), which keeps the
    # autotuned window. A small window needs a segment that fits it: a window under one segment
    # stalls the connection. Why 16 KiB and not less: with 8 KiB (the kernel's 16) a window holds
    # two 7300-byte segments, and the kernel's accounting of what they cost (loopback's buffers
    # are larger than their data) overflows it: segments dropped, a 200 ms retransmission timeout,
    # and 64 KiB messages at a quarter of the speed. The window doubles after each 512 KiB the
    # connection reads without a saturated queue ever holding it (a bulk publisher, a consumer: a
    # LAN publisher is not capped at ~28 KiB a round trip for long), up to amqp_rcvbuf_max and
    # net.core.rmem_max (amqp_rcvbuf_max <= amqp_rcvbuf: it never grows), except after 512 KiB of
    # publishes averaging under 1 KiB from a connection whose handshake took under 0.25 ms.
    # With these defaults saturated pubsub (2 pika publishers, 2 consumers, loopback) waits
    # p50/p99 ~0.11/0.18 s with BBR clients and ~0.06/0.37 s with cubic ones (Linux's default),
    # against 0.37/0.53 and 0.13/0.34 s with Linux's own sizing (amqp_rcvbuf 0, amqp_mss 0,
    # saturation_ready 1000, saturation_resume_ready 250).
    # amqp_held_rcvbuf is the receive buffer a connection gets the first time a saturated queue
    # holds it, for the rest of its life (0 = never changed). Not advised: shrinking a live
    # connection's buffer drops what it had in flight; the client's kernel then records a
    # reordering degree of up to 300 for the broker's address (ip tcp_metrics) and starts every
    # later connection from that host with a send buffer for 301 segments, which defeats the bound.
    amqp_rcvbuf: int = Field(16384, ge=0)
    amqp_rcvbuf_long_link_rtt: float = Field(0.002, ge=0)
    amqp_rcvbuf_max: int = Field(4 * 1024 * 1024, ge=0)
    amqp_mss: int = Field(7300, ge=0, le=32767)
    amqp_held_rcvbuf: int = Field(0, ge=0)
    # a queue with consumers holds its publishers at this many ready messages and releases them once
    # it is down to saturation_resume_ready (broker/saturation.py): 100 messages are 3-5 ms at the
    # 20-35k msg/s two pika consumers take, and one resumed read of a small window brings about as
    # many. 500/150 measured saturated p50 ~10% higher at the same throughput.
    saturation_ready: int = Field(100, ge=1)
    saturation_resume_ready: int = Field(30, ge=0)

    data_dir: Path = Path("headrace-data")

    # identity
    default_vhost: str = "/"
    default_user: str = "guest"
    default_pass: str = "guest"
    # users that may only connect from loopback addresses (RabbitMQ's loopback_users)
    loopback_users: list[str] = ["guest"]

    # AMQP tuning (what connection.tune offers)
    heartbeat: int = Field(60, ge=0, le=65535)
    frame_max: int = Field(131072, ge=4096, le=1 << 24)
    channel_max: int = Field(2047, ge=1, le=65535)
    max_message_size: int = Field(128 * MiB, ge=1, le=512 * MiB)
    # close a channel that holds one delivery unacked for longer than this (RabbitMQ: 30 min)
    consumer_timeout_ms: int | None = Field(1_800_000, ge=1)
    # a socket must send the protocol header within header_timeout of connecting and finish the
    # handshake (up to connection.open) within handshake_timeout (RabbitMQ: 10 s)
    header_timeout: float = Field(3.0, gt=0)
    handshake_timeout: float = Field(10.0, gt=0)

    # persistence
    fsync: Literal["batch", "always", "off"] = "batch"
    # the flusher takes at most this many records per write+fsync group
    fsync_batch_max: int = Field(4096, ge=1)
    # how long the flusher may wait after the first pending record to gather a bigger group (ms);
    # 0 = flush as soon as the event loop is idle. The loop's timers wait in whole milliseconds
    # (epoll), so any window under 1 ms waits about 1 ms (benchmarks/RESULTS.md, "A faster VM")
    fsync_window_ms: float = Field(0.0, ge=0, le=1000)
    # a group fsync runs on the event loop while fsyncs average below this (ms), else in a thread;
    # 0 = always in a thread
    fsync_inline_below_ms: float = Field(1.0, ge=0)
    segment_max_bytes: int = Field(32 * MiB, ge=4096)
    # the definitions log is compacted into a new snapshot once it is larger than this and than the
    # snapshot (persistence/definitions_log.py)
    definitions_log_min_bytes: int = Field(1 * MiB, ge=4096)
    # mirror log (Spark bridge): segment size (retention drops whole segments) and how often
    # retention runs, also while a mirror is idle (seconds)
    mirror_segment_max_bytes: int = Field(64 * MiB, ge=4096)
    mirror_retention_interval: float = Field(10.0, gt=0)
    # a mirror log is fsynced at most this often (seconds), and when a segment rolls and at shutdown:
    # what its writer wrote survives a crash of the process (the page cache holds it), a power loss
    # can take the last interval's records; nothing waits on it (confirms cover the store, not the
    # mirror), and a sync after every batch was more than half of mirroring's cost. 0: every batch
    mirror_sync_interval: float = Field(1.0, ge=0)
    # persistent publishes a connection may have waiting for fsync before it stops being read
    max_unconfirmed_per_connection: int = Field(10_000, ge=1)

    # memory bounds per queue: beyond these, entries are spilled to disk
    queue_max_resident_messages: int = Field(50_000, ge=16)
    queue_max_resident_bytes: int = Field(64 * MiB, ge=4096)

    # broker-wide alarms
    memory_high_watermark: float = Field(0.4, gt=0)  # <= 1: fraction of RAM; > 1: bytes
    # what the watermark is compared with: "held" = message bytes in memory plus unsent output (falls
    # as consumers drain, so the alarm clears); "rss" = the process's resident set, which CPython
    # rarely gives back, so an RSS alarm may stay up long after the backlog is gone
    memory_calculation_strategy: Literal["held", "rss"] = "held"
    disk_free_limit: int = Field(50 * MiB, ge=0)

    # limits (issue: hostile clients); each refusal is reported with an AMQP/HTTP error
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
    # bytes of uncommitted publishes one transactional channel may hold (beyond: 406 on the channel)
    max_tx_bytes: int = Field(64 * MiB, ge=1)
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

    # TLS (amqps and https); enabled when a certificate and key are given
    amqps_port: int | None = Field(None, ge=0, le=65535)  # RabbitMQ's default is 5671
    https_port: int | None = Field(None, ge=0, le=65535)
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    tls_cafile: Path | None = None  # CA bundle for client certificates
    tls_verify_peer: bool = False  # require a client certificate signed by tls_cafile

    # first run: an administrator besides (or instead of) guest
    admin_user: str | None = None
    admin_pass: str | None = None

    # shutdown
    shutdown_grace: float = Field(5.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # cluster (in progress, ARCHITECTURE.md "Cluster (in progress)"): with no etcd endpoints the
    # broker is standalone, as before, and nothing here is read
    node_name: str = Field("headrace@localhost", min_length=1, max_length=255)
    cluster_etcd_endpoints: str = ""  # comma-separated etcd client URLs, e.g. http://127.0.0.1:2379
    cluster_id: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # etcd keys: /headrace/<id>/
    cluster_port: int = Field(25672, ge=0, le=65535)  # the replication listener (RabbitMQ's inter-node port)
    cluster_lease_ttl_s: int = Field(5, ge=2, le=60)  # a dead leader's lease expires after this
    cluster_min_in_sync: int | None = Field(None, ge=1)  # copies on disk before a confirm; None = a majority

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

    @field_validator("amqp_mss")
    @classmethod
    def _mss_in_range(cls, v: int) -> int:
        if 0 < v < 88:
            raise ValueError("amqp_mss must be 0 (the route's) or at least 88 (the kernel's minimum segment)")
        return v

    @model_validator(mode="after")
    def _small_windows_need_small_segments(self) -> Settings:
        for name in ("amqp_rcvbuf", "amqp_held_rcvbuf"):
            window = getattr(self, name)
            if window and not 0 < self.amqp_mss <= window:
                raise ValueError(f"{name} ({window}) needs amqp_mss between 88 and {window} (it is "
                                 f"{self.amqp_mss}; 0 is the route's, 64 KiB on loopback): a window smaller "
                                 f"than a segment stalls the connection; or set {name} to 0 for Linux's "
                                 "own sizing")
        return self

    @model_validator(mode="after")
    def _resume_below_bound(self) -> Settings:
        if self.saturation_resume_ready >= self.saturation_ready:
            raise ValueError(f"saturation_resume_ready ({self.saturation_resume_ready}) must be below "
                             f"saturation_ready ({self.saturation_ready})")
        return self

    @field_validator("default_vhost")
    @classmethod
    def _vhost_not_empty(cls, v: str) -> str:
        if not v:
            raise ValueError("default_vhost must not be empty")
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = os.environ.get("HEADRACE_CONFIG_FILE_INTERNAL")
        if toml_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    @property
    def memory_limit_bytes(self) -> int:
        if self.memory_high_watermark <= 1:
            total = _total_memory()
            return int(total * self.memory_high_watermark)
        return int(self.memory_high_watermark)


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 * 1024 * MiB


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from a TOML file (optional), the environment and explicit overrides."""
    path = config_file or (Path(os.environ["HEADRACE_CONFIG"]) if os.environ.get("HEADRACE_CONFIG") else None)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    clean = {k: v for k, v in overrides.items() if v is not None}
    old = os.environ.get("HEADRACE_CONFIG_FILE_INTERNAL")
    try:
        if path is not None:
            os.environ["HEADRACE_CONFIG_FILE_INTERNAL"] = str(path)
        return Settings(**clean)
    finally:
        if old is None:
            os.environ.pop("HEADRACE_CONFIG_FILE_INTERNAL", None)
        else:
            os.environ["HEADRACE_CONFIG_FILE_INTERNAL"] = old
