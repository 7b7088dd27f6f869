"""Wall time of ``headrace export`` and ``headrace replay`` as a user runs them (a fresh process
each, start-up included), on pyarrow (``--engine arrow``) and on Spark (``--engine spark``,
``local[*]``), alternated A/B: a small log (1,000 messages) and a large one (--large messages).
Medians of --runs runs each.

    .venv/bin/python benchmarks/bench_small_jobs.py [--small 1000] [--large 1000000] [--runs 3]
        [--jobs "export small,replay small,export large"]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord  # noqa: E402
from headrace.persistence.tier_manifest import all_segments  # noqa: E402


def write_log(data: Path, name: str, n: int, body: int) -> int:
    log = MirrorLog(data, "/", name)
    log.recover()
    payload = b"x" * body
    for start in range(0, n, 10_000):
        log.append_many([MirrorRecord(1_700_000_000_000 + i, f"k.{i % 64}", b"", payload)
                         for i in range(start, min(start + 10_000, n))])
    log.close()
    return sum(s.size for s in all_segments(data, "/", name))


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", default="export small,replay small,export large")
    args = ap.parse_args()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    print(f"load: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-small-jobs-") as tmpdir:
        tmp = Path(tmpdir)
        broker = Headrace(tmp)
        try:
            data = tmp / "headrace"
            wanted = [j.strip() for j in args.jobs.split(",")]
            sizes = {"small": write_log(data, "small", args.small, args.body),
                     "large": write_log(data, "large", args.large, args.body) if "export large" in wanted else 0}
            amqp = f"amqp://guest:guest@127.0.0.1:{broker.port}/%2F"
            subprocess.run([sys.executable, "-m", "headrace", "--url", f"http://127.0.0.1:{broker.http_port}",
                            "exchange", "declare", "again", "--type", "topic"], check=True, capture_output=True)
            jobs = {
                "export small": ["export", "--data-dir", str(data), "--exchange", "small", "--out", str(tmp / "o"),
                                 "--overwrite"],
                "replay small": ["replay", "--data-dir", str(data), "--exchange", "small", "--to-exchange", "again",
                                 "--amqp-url", amqp, "--at-least-once", "--progress-dir", str(tmp / "p")],
                "export large": ["export", "--data-dir", str(data), "--exchange", "large", "--out", str(tmp / "o"),
                                 "--overwrite"],
            }
            for job, argv in jobs.items():
                if job not in wanted:
                    continue
                times: dict[str, list[float]] = {"arrow": [], "spark": []}
                for _ in range(args.runs):
                    for engine in ("arrow", "spark"):  # alternated
                        shutil.rmtree(tmp / "p", ignore_errors=True)
                        times[engine].append(timed([*argv, "--engine", engine], env))
                        print(f"  {job} {engine}: {times[engine][-1]:.2f} s", flush=True)
                size = sizes[job.split()[1]]
                a, s = statistics.median(times["arrow"]), statistics.median(times["spark"])
                print(f"{job:13} ({size / 1e6:7.1f} MB): arrow {a:6.2f} s  spark {s:6.2f} s  spark/arrow {s / a:5.1f}x"
                      f"   runs arrow {[round(t, 2) for t in times['arrow']]} spark {[round(t, 2) for t in times['spark']]}")
        finally:
            broker.stop()
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
