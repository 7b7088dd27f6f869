"""Shared fixtures: a real broker process on loopback ports chosen by the kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

READY_TIMEOUT = 30.0

if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist's workers are given COLUMNS=80 and LINES=24; the CLI's rich consoles, made when it is
    # imported, would take them as a fixed size and ignore the terminal a test gives a command
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``make test``'s two worker processes take whole shares of the suite (tests/shares.py)."""
    from shares import ShareScheduling

    return ShareScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Spark tests first: in two processes their share is the longest, so it starts at once."""
    from shares import SPARK

    items.sort(key=lambda item: not item.nodeid.startswith(SPARK))  # stable: the rest keep their order


class BrokerProcess:
    """``headrace serve`` in a subprocess; ready when it logs its listeners."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.args = list(args)
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.amqp_port = 0
        self.http_port = 0
        self.ports: dict[str, int] = {}  # every listener's port, from the ports file
        self._ready = threading.Event()

    def start(self) -> BrokerProcess:
        ports_file = self.data_dir / "ports.json"
        ports_file.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self._ready = threading.Event()  # its own per process: a killed one's reader may still set its own
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
             "--data-dir", str(self.data_dir), "--ports-file", str(ports_file), *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )
        threading.Thread(target=self._drain, args=(self.proc, self._ready), daemon=True).start()
        if not self._ready.wait(READY_TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines[-40:]))
        ports = self.ports = json.loads(ports_file.read_text())
        self.amqp_port = ports["amqp"]
        self.http_port = ports.get("http", 0)
        return self

    def _drain(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)
            if "headrace: data directory" in line:  # the last startup log line (not an "Error: data directory ...")
                ready.set()
        ready.set()

    def rss(self) -> int:
        """Resident set size of the broker process, in bytes."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module (tests use their own queue names), with the settings in the
    module's ``BROKER_ENV`` (``HEADRACE_*`` variables) if it has one."""
    env = getattr(request.module, "BROKER_ENV", None)
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"), env=env).start()
    yield proc
    code = proc.stop()
    assert code == 0, proc.log[-4000:]


def _brokers(default_dir: Callable[[int], Path]) -> Iterator[type]:
    """A factory of broker processes, all killed when the fixture ends."""
    started: list[BrokerProcess] = []

    def make(*args: str, data_dir: Path | None = None, env: dict[str, str] | None = None) -> BrokerProcess:
        proc = BrokerProcess(data_dir or default_dir(len(started)), *args, env=env)
        proc.data_dir.mkdir(parents=True, exist_ok=True)
        started.append(proc)
        return proc.start()

    yield make  # type: ignore[misc]
    for proc in started:
        proc.kill()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type]:
    """Start brokers of one's own (crash/restart tests); all are stopped at the end."""
    yield from _brokers(lambda _: tmp_path / "data")


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[type]:
    """``broker_factory`` for brokers a whole module shares (a cluster the tests leave whole)."""
    base = tmp_path_factory.mktemp("brokers")
    yield from _brokers(lambda n: base / f"b{n}")


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """One headless Debian Chromium for the whole session, driven through Debian's chromedriver
    (both installed by ``make browser``); paths are given so Selenium never downloads a driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # JavaScript errors, for the tests
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(15)
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


class Tmpfs:
    """A tmpfs mounted on a directory of its own: a small real filesystem to fill up."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            # not a skip: these tests stand for the full-disk behaviour and must run (as root)
            pytest.fail(f"cannot mount a tmpfs on {path} (tests need root): {result.stderr.strip()}")
        self._filler = 0

    def free(self) -> int:
        return os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize

    def fill(self, leave: int = 0) -> Path:
        """Write a filler file until ``leave`` bytes or fewer are free; returns it."""
        self._filler += 1
        filler = self.path / f"filler-{self._filler}"
        chunk = b"\0" * (64 << 10)
        with open(filler, "wb") as f:
            try:
                while self.free() > leave:
                    f.write(chunk[: max(min(len(chunk), self.free() - leave), 1)])
                    f.flush()
            except OSError:
                pass  # full
        return filler

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Tmpfs]]:
    """Mount tmpfs filesystems of a given size (``small_tmpfs("8m")``); unmounted at the end."""
    mounts: list[Tmpfs] = []

    def mount(size: str = "8m") -> Tmpfs:
        path = tmp_path / f"tmpfs-{len(mounts)}"
        path.mkdir()
        fs = Tmpfs(path, size)
        mounts.append(fs)
        return fs

    try:
        yield mount
    finally:
        for fs in mounts:
            fs.unmount()
