"""The Spark work of a resumed replay's first job (the rows a killed run may have left in doubt),
reading only the stretch of the log its progress files give (``doubt_range``) against reading
all of it, as before that range was saved.

    .venv/bin/python benchmarks/bench_replay_resume.py [--messages 1000000] [--killed-at 20000] [--rounds 3]

A log of ``--messages`` records is replayed up to ``--killed-at`` into a progress directory (what a
run cut short there leaves, its ``finished`` file removed); then, alternating, the resume job's
DataFrame is evaluated in full (Spark's ``noop`` sink: everything but the publishing of its few
thousand rows) with the range and with the whole log, after one unmeasured round of each.
One JSON line per round, then the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_replay import add_log_args, replay_setup  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    add_log_args(ap, messages=1_000_000)
    ap.add_argument("--killed-at", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with replay_setup(args, "headrace-resume-") as (tmp, ch, spark, url):
        from headrace.spark_bridge.export import read_log
        from headrace.spark_bridge.replay import _first_past, load_progress, replay
        from headrace.spark_bridge.replay_progress import doubt_range
        from headrace.spark_bridge.replay_sink import uncertain_rows

        ch.exchange_declare("replayed", "topic")
        progress = tmp / "progress"
        replay(spark, str(tmp / "data"), "src", amqp_url=url, to_exchange="replayed",
               to_offset=args.killed_at - 1, partitions=args.partitions, window=args.window,
               progress_dir=str(progress))
        (progress / "finished").unlink()  # as a run cut short leaves it
        done = load_progress(str(progress))
        span = doubt_range(str(progress))
        assert span is not None  # this tree's sink writes the range
        lo, hi = span
        limit = uncertain_rows(None, args.window)
        columns = ("offset", "routing_key", "properties", "body")
        times: dict[str, list[float]] = {"bounded": [], "whole log": []}
        for i in range(-1, args.rounds):  # round -1 warms the JVM and the workers up, unmeasured
            order = ["bounded", "whole log"] if i % 2 == 0 else ["whole log", "bounded"]
            for name in order:
                bounded = name == "bounded"
                bounds = {"from_offset": lo + 1, "to_offset": hi} if bounded else {}
                rows = read_log(spark, str(tmp / "data"), "src", **bounds).select(*columns)
                start = time.perf_counter()
                _first_past(spark, rows, done, args.partitions, limit, bounded).repartition(
                    args.partitions, "routing_key").sortWithinPartitions("offset") \
                    .write.format("noop").mode("overwrite").save()
                if i >= 0:
                    times[name].append(time.perf_counter() - start)
            if i >= 0:
                print(json.dumps({"round": i + 1, **{k: round(v[-1], 2) for k, v in times.items()}}), flush=True)
        print(json.dumps({"messages": args.messages, "killed_at": args.killed_at, "range": [lo, hi],
                          **{f"{k} median s": round(statistics.median(v), 2) for k, v in times.items()}}))

if __name__ == "__main__":
    main()
