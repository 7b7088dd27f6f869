"""``headrace stream-bridge``: a Structured Streaming query from a log to an exchange, exactly once.

It reads a mirrored exchange's, a stream's or a super stream's log with the ``headrace`` source
(from the data directory, or over the HTTP API with ``--url``) and publishes every row into
``--to-exchange`` with the ``headrace`` sink, keyed ``<log>:<offset>`` (``keyColumns``), the key a
``headrace replay`` gives the same message. The query's offsets live in ``--checkpoint``: the same
command after a stop, a crash or a SIGKILL resumes there, and the target's dedup window drops what
the killed run had already published. So the command first checks, over the target broker's HTTP
API, that the target keeps at least a micro-batch (``--max-records-per-trigger``) of keys read from
``--dedup-header``, and refuses in one line otherwise (``--at-least-once`` skips the check).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import click

from .client import fail
from .spark_commands import _check_log, _check_super_stream, _check_target, _need_pyspark, console, spark_session

__all__ = ["bridge_query", "sink_options", "stream_bridge_command"]

DEFAULT_BATCH = 10_000


def _window_problem(amqp_url: str, http_url: str | None, exchange: str, need: int, header: str) -> str | None:
    import httpx

    from .replay_check import dedup_window, target_api, window_problem

    url, user, password, vhost = target_api(amqp_url, http_url)
    try:
        args = dedup_window(url, user, password, vhost, exchange)
    except httpx.HTTPError as exc:
        return (f"cannot check the target exchange's dedup window over the HTTP API at {url} ({exc}): give "
                f"--http-url, or --at-least-once to bridge without that check")
    return window_problem(
        args, exchange, need, header, who="the bridge",
        risk=f"a bridge restarted after a kill can deliver a micro-batch ({need} messages) twice",
        short=f"{need} of a micro-batch (--max-records-per-trigger) a restarted bridge can publish again")


@click.command("stream-bridge")
@click.option("--exchange", help="A mirrored exchange's log.")
@click.option("--stream", help="A stream queue's log.")
@click.option("--super-stream", help="A super stream's partition streams.")
@click.option("--vhost", default="/", show_default=True, help="The source's vhost.")
@click.option("--data-dir", help="The broker's data directory (on this machine) [./headrace-data].")
@click.option("--url", help="The source broker's HTTP API instead of --data-dir, e.g. http://broker:15672.")
@click.option("--user", default="guest", show_default=True, help="HTTP API user (with --url).")
@click.option("--password", default="guest", show_default=True, help="HTTP API password (with --url).")
@click.option("--ca-file", help="CA bundle of the broker's certificate (https --url).")
@click.option("--to-exchange", required=True, help="The exchange to publish to.")
@click.option("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True,
              help="The target broker (its vhost in the path).")
@click.option("--checkpoint", required=True, help="The query's checkpoint directory: the same one resumes.")
@click.option("--starting-offsets", default="earliest", show_default=True,
              help="earliest, latest or JSON {\"<log>\": offset}: where a new query starts.")
@click.option("--starting-timestamp", help="Start a new query at the first record at or after this (ms or ISO).")
@click.option("--max-records-per-trigger", type=click.IntRange(1), default=DEFAULT_BATCH, show_default=True)
@click.option("--max-bytes-per-trigger", type=click.IntRange(1), help="Bytes of log per micro-batch, at most.")
@click.option("--trigger-interval", type=float, default=1.0, show_default=True, help="Seconds between micro-batches.")
@click.option("--available-now", is_flag=True, help="Publish what the log holds now, then exit.")
@click.option("--dedup-header", default="x-deduplication-header", show_default=True)
@click.option("--window", type=click.IntRange(1), default=1000, show_default=True,
              help="Publisher confirms in flight per task.")
@click.option("--http-url", help="The target broker's HTTP API, where its dedup window is checked "
              "(default: the --amqp-url host, port 15672, its credentials).")
@click.option("--at-least-once", is_flag=True, help="Bridge into a target without a large enough dedup window.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master, e.g. spark://host:7077.")
@click.option("--conf", multiple=True, help="Spark configuration k=v (repeatable).")
def stream_bridge_command(exchange: str | None, stream: str | None, super_stream: str | None, vhost: str,
                          data_dir: str | None, url: str | None, user: str, password: str, ca_file: str | None,
                          to_exchange: str, amqp_url: str, checkpoint: str, starting_offsets: str,
                          starting_timestamp: str | None, max_records_per_trigger: int,
                          max_bytes_per_trigger: int | None, trigger_interval: float, available_now: bool,
                          dedup_header: str, window: int, http_url: str | None, at_least_once: bool, master: str,
                          conf: tuple[str, ...]) -> None:
    """Publish a log's messages into an exchange as they arrive, exactly once, as a Spark
    Structured Streaming query that resumes from --checkpoint (SIGINT/SIGTERM stop it)."""
    _need_pyspark("stream-bridge")
    named = {k: v for k, v in (("exchange", exchange), ("stream", stream), ("superStream", super_stream)) if v}
    if len(named) != 1:
        raise click.UsageError("give one of --exchange, --stream or --super-stream")
    if url and data_dir:
        raise click.UsageError("give --url or --data-dir, not both")
    source: dict[str, str] = {**named, "vhost": vhost, "startingOffsets": starting_offsets,
                              "maxRecordsPerTrigger": str(max_records_per_trigger)}
    if starting_timestamp:
        source["startingTimestamp"] = starting_timestamp
        del source["startingOffsets"]
    if max_bytes_per_trigger:
        source["maxBytesPerTrigger"] = str(max_bytes_per_trigger)
    if url:
        source.update({"url": url, "user": user, "password": password, **({"caFile": ca_file} if ca_file else {})})
    else:
        import os

        data_dir = os.path.abspath(data_dir or "headrace-data")  # executors resolve it, not this directory
        source["path"] = data_dir
        if super_stream:
            _check_super_stream(data_dir, vhost, super_stream)
        elif stream:
            _check_log(os.path.join(data_dir, "streams"), vhost, stream, True)
        else:
            _check_log(data_dir, vhost, exchange or "", False)
    _check_target(amqp_url, to_exchange)
    if at_least_once:
        console.print("bridging at least once: a restarted bridge may deliver a micro-batch twice (--at-least-once)")
    else:
        problem = _window_problem(amqp_url, http_url, to_exchange, max_records_per_trigger, dedup_header)
        if problem is not None:
            fail(problem, 1)

    with console.status("starting Spark ..."):
        spark = spark_session(master, conf)
    _run(spark, source, sink_options(amqp_url, to_exchange, dedup_header, window, checkpoint),
         None if available_now else trigger_interval)


def sink_options(amqp_url: str, to_exchange: str, dedup_header: str, window: int, checkpoint: str) -> dict[str, str]:
    """The ``headrace`` sink's options: each row keyed ``<log>:<offset>``, as a replay keys it."""
    return {"amqpUrl": amqp_url, "exchange": to_exchange, "dedupHeader": dedup_header, "window": str(window),
            "keyColumns": "exchange,offset", "checkpointLocation": checkpoint}


def bridge_query(spark: Any, source: dict[str, str], sink: dict[str, str], interval: float | None) -> Any:
    """The bridge's query, started: the ``headrace`` source's ``source`` options into the
    ``headrace`` sink's ``sink`` options, availableNow when ``interval`` is None."""
    from headrace.spark_bridge.datasource import register

    register(spark)
    df = spark.readStream.format("headrace").options(**source).load().select("exchange", "offset", "routing_key",
                                                                           "properties", "body")
    writer = df.writeStream.format("headrace").options(**sink)
    writer = writer.trigger(availableNow=True) if interval is None else \
        writer.trigger(processingTime=f"{max(interval, 0.0)} seconds")
    return writer.start()


def _run(spark: Any, source: dict[str, str], sink: dict[str, str], interval: float | None) -> None:
    """Runs the query until it ends (availableNow) or a signal stops it, printing each batch."""
    query = bridge_query(spark, source, sink, interval)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    shown, total = -1, 0
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.5)
            for progress in query.recentProgress:
                if progress["batchId"] > shown:
                    shown = progress["batchId"]
                    total += progress["numInputRows"]
                    if progress["numInputRows"]:
                        console.print(f"batch {shown}: published {progress['numInputRows']} messages "
                                      f"({total} since start)")
        if query.exception() is not None:
            fail(f"the bridge stopped: {query.exception()}", 1)
    finally:
        if query.isActive:
            query.stop()
        spark.stop()
    console.print(f"published {total} messages")
