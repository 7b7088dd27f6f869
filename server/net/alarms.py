"""Memory and disk watermarks, RabbitMQ-style: a task samples memory (the bytes the broker holds
for clients, or RSS) and free disk and raises or clears broker alarms. While an alarm is up, publishing connections are not read (their session's
``read_paused``) and get ``connection.blocked``; consumers keep draining.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import trio

from headrace.server.broker import Broker

from .gate import Gate

__all__ = ["ALARM_INTERVAL", "read_rss", "run_alarms"]

log = logging.getLogger("headrace.alarms")

# Sampling period: an alarm reacts within this time; /proc reads are cheap at this rate.
ALARM_INTERVAL = 0.5
# Clear the memory alarm only below 90% of the watermark, so it does not flap at the edge.
MEMORY_CLEAR_RATIO = 0.9
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


async def run_alarms(broker: Broker, gate: Gate, memory_limit: int, disk_dir: Path, disk_free_limit: int,
                     strategy: str = "held") -> None:
    what = "held memory" if strategy == "held" else "RSS"
    while True:
        rss = read_rss()
        used = broker.held_memory() if strategy == "held" else rss
        broker.memory_rss = rss
        broker.memory_used = used
        memory_on = "memory" in broker.alarms
        if used > memory_limit and not memory_on:
            log.warning("memory alarm: %s %.1f MiB above the watermark %.1f MiB", what, used / 2**20,
                        memory_limit / 2**20)
            broker.set_alarm("memory", True)
            gate.notify()
        elif memory_on and used < memory_limit * MEMORY_CLEAR_RATIO:
            log.warning("memory alarm cleared: %s %.1f MiB", what, used / 2**20)
            broker.set_alarm("memory", False)
            gate.notify()
        try:
            free = shutil.disk_usage(disk_dir).free
        except OSError:
            free = disk_free_limit + 1
        broker.disk_free = free
        disk_on = "disk" in broker.alarms
        if free < disk_free_limit and not disk_on:
            log.warning("disk alarm: %d MiB free, below the limit %d MiB", free >> 20, disk_free_limit >> 20)
            broker.set_alarm("disk", True)
            gate.notify()
        elif disk_on and free >= disk_free_limit:
            log.warning("disk alarm cleared: %d MiB free", free >> 20)
            broker.set_alarm("disk", False)
            gate.notify()
        await trio.sleep(ALARM_INTERVAL)
