"""Memory and disk watermarks, RabbitMQ-style: a task samples memory and free disk and raises or
clears broker alarms. While an alarm is up, publishing connections are not read (their session's
``read_paused``) and get ``connection.blocked``; consumers keep draining.

Owners: ``DiskWatch`` owns the disk alarm. Writers (the store flusher, spill appends) report the
bytes they write and their write errors to it; it checks free space again as soon as a few MiB
have been written or its estimate (free at the last check minus bytes written since) falls under
the limit, so the limit holds at any write rate, not only at the sampling period. A write that
failed (ENOSPC) keeps the alarm up until that writer reports a good write again.
``MemoryWatch`` owns the memory alarm. Connections report the bytes they read from clients (one call
per read, not per message); it samples memory again as soon as ``check_every`` bytes came in, so a
fast publisher passes the watermark by at most that much (plus the read each publishing connection
is applying when the alarm goes up), not by what it can send in a sampling period.

The memory alarm counts what consumers and clients can relieve: message bytes held in memory,
uncommitted transactions and output not yet sent (``held_memory``). The fixed cost of the objects
(queues, exchanges, bindings, connections, channels, consumers: ``topology_memory``) is sampled
beside it into its own gauge and logged when it passes a share of the watermark, but does not
raise the alarm: publishers blocked by empty queues and bindings would stay blocked for good,
since no consumer can drain them. An operator tells "too many objects" from "too many messages"
by the two figures.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import trio

from headrace.server.broker import Broker

from .gate import Gate

__all__ = ["ALARM_INTERVAL", "DiskWatch", "MemoryWatch", "held_memory", "read_rss", "run_alarms",
           "topology_memory", "topology_parts"]

log = logging.getLogger("headrace.alarms")

# Sampling period: an alarm reacts within this time; /proc reads are cheap at this rate.
ALARM_INTERVAL = 0.5
# Clear the memory alarm only below 90% of the watermark, so it does not flap at the edge.
MEMORY_CLEAR_RATIO = 0.9
# Free space is checked again after this many bytes written (a statvfs costs a few microseconds).
DISK_CHECK_BYTES = 1 << 20
# Memory is sampled again after this many bytes read from clients, or an eighth of the watermark
# when that is less (a low watermark is not overshot by a multiple of itself). A sample also walks
# every exchange for the objects' estimate, so it is not taken on every read.
MEMORY_CHECK_BYTES = 4 << 20
MEMORY_CHECK_MIN = 64 << 10
# RAM each object costs besides the messages it holds, measured on a running broker and rounded
# up (benchmarks/bench_object_costs.py, RESULTS.md "What an object costs"): an idle queue; a
# binding (topic, the dearer kind); an exchange; a connection with its parser, writer buffers,
# socket and task; a channel; a consumer.
QUEUE_COST = 1_800
BINDING_COST = 600
EXCHANGE_COST = 1_200
CONNECTION_COST = 25_000
CHANNEL_COST = 2_500
CONSUMER_COST = 500
# The topology's estimate is logged (a warning) once it passes this share of the watermark, and
# again (info) when it falls back under TOPOLOGY_QUIET_SHARE of it.
TOPOLOGY_LOG_SHARE = 0.5
TOPOLOGY_QUIET_SHARE = 0.4
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class QueuedOutput(Protocol):
    """A connection's output queued and not yet handed to its socket (an AMQP handler)."""

    @property
    def pending_bytes(self) -> int: ...


def held_memory(broker: Broker, pending_output: Iterable[QueuedOutput] = ()) -> int:
    """The "held" calculation: bytes of messages and uncommitted transactions held for clients,
    plus output not yet sent. Unlike RSS it falls as soon as consumers drain or clients leave, so
    an alarm on it clears. ``pending_output``: the connection handlers that may have output queued
    (``MemoryWatch.pending_output``); nothing here walks every queue or every connection, since
    this runs several times a second."""
    return broker.held_memory() + sum(handler.pending_bytes for handler in pending_output)


def topology_parts(broker: Broker) -> dict[str, int]:
    """Estimated bytes of each kind of object, by its measured cost (see the constants): counts
    kept as objects come and go, and one walk over the exchanges for their bindings."""
    queues = bindings = exchanges = 0
    for vhost in broker.vhosts.values():
        queues += len(vhost.queues)
        exchanges += len(vhost.exchanges)
        bindings += sum(exchange.binding_count for exchange in vhost.exchanges.values())
    return {"queues": queues * QUEUE_COST, "bindings": bindings * BINDING_COST,
            "exchanges": exchanges * EXCHANGE_COST, "connections": len(broker.connections) * CONNECTION_COST,
            "channels": broker.open_channels * CHANNEL_COST, "consumers": broker.held.consumers * CONSUMER_COST}


def topology_memory(broker: Broker) -> int:
    """The objects' fixed cost: what the memory alarm leaves out (module docstring)."""
    return sum(topology_parts(broker).values())


@dataclass(slots=True)
class DiskWatch:
    """The disk alarm and its inputs (see the module docstring)."""

    directory: Path
    free_limit: int
    broker: Broker | None = None
    gate: Gate | None = None
    check_every: int = DISK_CHECK_BYTES
    free: int = 1 << 62  # at the last check
    written: int = 0  # bytes written since the last check
    failures: set[str] = field(default_factory=set)  # writers whose last write failed

    def wrote(self, nbytes: int) -> None:
        """A writer put ``nbytes`` on disk (called on the event loop)."""
        self.written += nbytes
        if self.written >= self.check_every or self.free - self.written < self.free_limit:
            self.check()

    def write_failed(self, writer: str) -> None:
        """``writer``'s last write failed: the disk alarm is up until ``write_ok(writer)``."""
        if writer not in self.failures:
            self.failures.add(writer)
            self.check()

    def write_ok(self, writer: str) -> None:
        if writer in self.failures:
            self.failures.discard(writer)
            self.check()

    def check(self) -> None:
        """Sample free space now and raise or clear the alarm."""
        try:
            self.free = shutil.disk_usage(self.directory).free
        except OSError:
            self.free = 1 << 62  # unknown: only failed writes raise the alarm
        self.written = 0
        broker = self.broker
        if broker is None:
            return
        broker.disk_free = self.free
        low = self.free < self.free_limit or bool(self.failures)
        if low == ("disk" in broker.alarms):
            return
        if low:
            log.warning("disk alarm: %d MiB free (limit %d MiB)%s", self.free >> 20,
                        self.free_limit >> 20,
                        f"; writes failing: {', '.join(sorted(self.failures))}" if self.failures else "")
        else:
            log.warning("disk alarm cleared: %d MiB free", self.free >> 20)
        broker.set_alarm("disk", low)
        if self.gate is not None:
            self.gate.notify()


@dataclass(slots=True)
class MemoryWatch:
    """The memory alarm and its inputs (see the module docstring)."""

    broker: Broker
    gate: Gate
    limit: int
    strategy: str = "held"  # or "rss"
    check_every: int = 0  # 0: MEMORY_CHECK_BYTES, or an eighth of ``limit`` when that is less
    received: int = 0  # bytes read from clients since the last sample
    # the AMQP handlers that may have output queued (each puts itself in and takes itself out)
    pending_output: dict[QueuedOutput, None] = field(default_factory=dict)
    topology_loud: bool = False  # the topology's share of the watermark was logged as large

    def __post_init__(self) -> None:
        if not self.check_every:
            self.check_every = max(MEMORY_CHECK_MIN, min(MEMORY_CHECK_BYTES, self.limit // 8))

    def read(self, nbytes: int) -> None:
        """A connection read ``nbytes`` from its client and applied them (called on the event loop)."""
        self.received += nbytes
        if self.received >= self.check_every:
            self.check()

    def check(self) -> None:
        """Sample memory now and raise or clear the alarm."""
        self.received = 0
        broker = self.broker
        rss = read_rss()
        used = held_memory(broker, self.pending_output) if self.strategy == "held" else rss
        broker.memory_rss = rss
        broker.memory_used = used
        self._topology(topology_parts(broker))
        memory_on = "memory" in broker.alarms
        what = "held memory" if self.strategy == "held" else "RSS"
        if used > self.limit and not memory_on:
            log.warning("memory alarm: %s %.1f MiB above the watermark %.1f MiB", what, used / 2**20,
                        self.limit / 2**20)
            broker.set_alarm("memory", True)
            self.gate.notify()
        elif memory_on and used < self.limit * MEMORY_CLEAR_RATIO:
            log.warning("memory alarm cleared: %s %.1f MiB", what, used / 2**20)
            broker.set_alarm("memory", False)
            self.gate.notify()


    def _topology(self, parts: dict[str, int]) -> None:
        """Publish the objects' estimate (``Broker.memory_topology``) and say so in the log when it
        is a large share of the watermark: that memory is not the alarm's, and no consumer frees it."""
        total = sum(parts.values())
        self.broker.memory_topology, self.broker.memory_topology_parts = total, parts
        if not self.topology_loud and total > self.limit * TOPOLOGY_LOG_SHARE:
            self.topology_loud = True
            log.warning("memory: queues, exchanges, bindings, connections and channels cost an estimated "
                        "%.1f MiB, %.0f%% of the watermark %.1f MiB (%s); the memory alarm counts "
                        "messages and buffers only, so they do not block publishers",
                        total / 2**20, 100 * total / self.limit, self.limit / 2**20,
                        ", ".join(f"{kind} {size / 2**20:.1f} MiB" for kind, size in parts.items() if size))
        elif self.topology_loud and total < self.limit * TOPOLOGY_QUIET_SHARE:
            self.topology_loud = False
            log.info("memory: the objects' estimated cost is down to %.1f MiB", total / 2**20)


async def run_alarms(memory: MemoryWatch, disk: DiskWatch) -> None:
    """Sample both every ``ALARM_INTERVAL``, whatever the traffic: an alarm clears as consumers
    drain or space is freed without any client sending anything."""
    disk.broker, disk.gate = memory.broker, memory.gate
    while True:
        memory.check()
        disk.check()
        await trio.sleep(ALARM_INTERVAL)
