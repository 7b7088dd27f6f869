"""A real broker (``headrace serve``) for a benchmark script, on ports the kernel picks: started on a
data directory the script filled (a mirror log written ahead), stopped with SIGTERM at the end.
Shared by the scripts that time a client of the broker against reading its files directly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path


def start_broker(data: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """The broker process and its listeners' ports by name (``amqp``, ``http``), read from the ports
    file it writes once it listens; the ports file sits beside ``data``."""
    ports = data.parent / "ports.json"
    proc = subprocess.Popen([sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
                             "--data-dir", str(data), "--ports-file", str(ports)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (ports.exists() and ports.stat().st_size):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("broker did not start")
        time.sleep(0.1)
    return proc, {name: int(port) for name, port in json.loads(ports.read_text()).items()}


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
