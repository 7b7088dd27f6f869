"""A Spark standalone cluster from pyspark's own jars: a master and two workers (one core, 1 GiB
each) started with ``bin/spark-class``, on ports the kernel picks, each in a process group of its
own so that stopping it takes its executors and their Python workers with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
STARTUP = 120.0  # seconds, on a loaded 2-core machine

DAEMON_ENV = {
    "SPARK_HOME": str(SPARK_HOME),
    "SPARK_LOCAL_IP": "127.0.0.1",
    "SPARK_DAEMON_MEMORY": "256m",
    "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto",
    # no REST submission server: it would take the fixed port 6066
    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    "PYSPARK_PYTHON": sys.executable,
}


def _wait_line(log: Path, pattern: str, proc: subprocess.Popen[bytes], what: str) -> re.Match[str]:
    deadline = time.monotonic() + STARTUP
    while True:
        found = re.search(pattern, log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n" + log.read_text(errors="replace")[-3000:])
        time.sleep(0.1)


class StandaloneCluster:
    def __init__(self, base: Path, workers: int = 2) -> None:
        self.base = base
        self.workers = workers
        self.procs: list[subprocess.Popen[bytes]] = []
        self.master_url = ""
        self.web_url = ""

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.base / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], cwd=self.base,
                                    env={**os.environ, **DAEMON_ENV}, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc, log

    def start(self) -> StandaloneCluster:
        master, log = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", "0", "--webui-port", "0")
        self.master_url = _wait_line(log, r"Starting Spark master at (spark://\S+)", master, "the master")[1]
        port = _wait_line(log, r"MasterWebUI: Bound MasterWebUI to \S+, and started at http://[^:]+:(\d+)",
                          master, "the master's web UI")[1]
        self.web_url = f"http://127.0.0.1:{port}"
        for i in range(self.workers):
            (self.base / f"work{i}").mkdir(exist_ok=True)
            self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0", "--cores", "1", "--memory", "1g", "--work-dir",
                        str(self.base / f"work{i}"), self.master_url)
        deadline = time.monotonic() + STARTUP
        while self.state().get("aliveworkers", 0) < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "".join((self.base / f"worker{i}.log").read_text(errors="replace")[-1500:]
                               for i in range(self.workers))
                raise RuntimeError(f"the workers did not register:\n{logs}")
            time.sleep(0.2)
        return self

    def state(self) -> dict:
        """The master's JSON UI: workers, running and completed applications."""
        try:
            return httpx.get(f"{self.web_url}/json/", timeout=5).json()
        except httpx.HTTPError:
            return {}

    def tasks_per_executor(self, app_id: str) -> dict[str, int]:
        """Tasks each executor of the application ran, from its log in its worker's work dir
        (``work<i>/<app>/<executor>/stderr``), keyed ``work<i>/<executor>``."""
        out = {}
        for stderr in self.base.glob(f"work*/{app_id}/*/stderr"):
            out[f"{stderr.parts[-4]}/{stderr.parts[-2]}"] = stderr.read_text(errors="replace").count("Running task ")
        return out

    def submit_conf(self) -> list[str]:
        """spark-submit's settings for this cluster: an executor per worker, small, started at once;
        a driver waits for both however long the applications ahead of it hold the workers (the
        default gives up after 30 s and starts on what it has); JVMs that start fast (serial GC,
        the C1 compiler only: these jobs are short)."""
        jvm = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"
        return ["--master", self.master_url, "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
                "--conf", "spark.scheduler.minRegisteredResourcesRatio=1",
                "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=600s", "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=4",
                "--conf", f"spark.driver.extraJavaOptions={jvm}", "--conf", f"spark.executor.extraJavaOptions={jvm}"]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
            try:  # what is left of its group (an executor, its Python workers)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
