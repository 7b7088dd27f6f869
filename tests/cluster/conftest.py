"""A real etcd for the cluster tests: Debian's ``etcd-server`` (``make test`` installs it), one
per test module, on free loopback ports with its data in a temporary directory.

One per module, not per test: etcd takes about a second to elect itself, and the tests keep to
key prefixes of their own (``cluster_name``). ``EtcdProcess.restart`` stops it and starts it again
on the same ports and data, for the tests of a cluster that sees its etcd go away and come back.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

READY_TIMEOUT = 20.0


def free_port() -> int:
    """A port the kernel had free a moment ago (etcd takes no port 0: it advertises its URLs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fixed_port() -> int:
    """A free port below the kernel's ephemeral range, for a process started again on the same port
    (a cluster node, etcd): a port from that range may be taken, while the process is down, by any
    outgoing connection's local end or another test's listener on port 0."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(20000, max(low, 20001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class EtcdProcess:
    """``etcd`` in a subprocess; ready once its JSON gateway answers a range request."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = 0
        self.peer_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / (data_dir.name + ".log")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdProcess:
        binary = shutil.which("etcd")
        if binary is None:
            pytest.fail("etcd is not installed: `make test` installs Debian's etcd-server")
        if not self.client_port:
            self.client_port, self.peer_port = fixed_port(), fixed_port()
        client, peer = f"http://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{self.peer_port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "--name", "default", "--data-dir", str(self.data_dir),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"default={peer}"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}:\n{self.log[-3000:]}")
            try:
                # a read through raft's leader: /health can answer before the member is serving
                r = httpx.post(f"{self.endpoint}/v3/kv/range", json={"key": "AA=="}, timeout=1.0)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not answer within {READY_TIMEOUT}s:\n{self.log[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def restart(self) -> None:
        """Stop and start again on the same ports and data (the port may be taken meanwhile only
        by another process binding port 0 at that moment, which loopback tests accept)."""
        self.stop()
        self.start()

    @property
    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def cluster_name() -> str:
    """A key prefix of the test's own in the module's etcd."""
    return "t" + uuid.uuid4().hex[:12]
