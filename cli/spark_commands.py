"""``headrace replay`` and ``headrace export``: Spark jobs over a mirrored exchange's log.

Local Spark (``local[*]``) by default; ``--master`` and ``--conf k=v`` pass through to the
SparkSession builder, so the same job runs on a cluster (reading ``--url``, or a data directory
the workers see), whose executors get headrace's executor side from the command as a zip
(``spark_bridge/pyfiles``). A small
log's job runs on pyarrow in this process instead, with the same output, and ``--url`` reads the
log over the broker's HTTP API (``spark_engine.py``). What can
be checked without Spark is checked first (pyspark installed, a mirror log for the exchange, the
replay target exchange on the broker), each failure one line and exit code 1, before a JVM starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from .client import fail
from .spark_engine import check_remote, choose_engine, local_bytes, remote_options, run_arrow, source_options, spark_asked

__all__ = ["FAST_CONF", "export_command", "replay_command", "spark_session"]

console = Console(stderr=True)

INSTALL_HINT = ("needs pyspark and pyarrow, which are not installed: run `make spark-deps` in the headrace "
                "checkout (or `.venv/bin/pip install -e '.[spark]'` there); Spark also needs Java 17")


def _need_pyspark(command: str) -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        fail(f"headrace {command} {INSTALL_HINT}", 1)


def _check_log(data_dir: str, vhost: str, exchange: str, stream: bool = False) -> None:
    """One line and exit 1 when there is nothing to read, rather than an empty job. ``stream``:
    ``exchange`` names a stream queue, whose log lies under ``data_dir`` (<data dir>/streams)."""
    from headrace.persistence.mirror_log import list_mirrors, list_segments

    root = Path(data_dir)
    broker_dir = root.parent if stream else root
    if not broker_dir.is_dir():
        fail(f"no data directory {broker_dir} (the broker's --data-dir; `make run` uses ./headrace-data)", 1)
    if not list_segments(root, vhost, exchange):
        logs = ", ".join(f"{e} (vhost {v})" for v, e in list_mirrors(root) if list_segments(root, v, e)) \
            if root.is_dir() else ""
        if stream:
            fail(f"stream '{exchange}' in vhost '{vhost}' has no log under {broker_dir}: declare it as a stream "
                 f"queue (x-queue-type: stream) and publish to it first"
                 + (f"; streams there: {logs}" if logs else "; no stream there has one"), 1)
        fail(f"exchange '{exchange}' in vhost '{vhost}' has no mirror log under {data_dir}: mirror it with "
             f"`headrace mirror enable {exchange}` and publish to it first"
             + (f"; logs there: {logs}" if logs else "; no exchange there has one"), 1)


def _check_super_stream(data_dir: str, vhost: str, name: str) -> None:
    from headrace.spark_bridge.sources import STREAMS_DIR, local_partitions

    try:
        local_partitions(Path(data_dir) / STREAMS_DIR, vhost, name)
    except ValueError as exc:
        fail(f"{exc}: create it with `headrace stream add-super {name}` and publish to it first", 1)


def _check_out(out: str, overwrite: bool) -> None:
    """The export replaces its output directory: refuse one that holds anything unless told to."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        fail(f"--out {out} is a file, not a directory", 1)
    if not overwrite and path.is_dir() and any(path.iterdir()):
        fail(f"--out {out} is not empty: the export would replace what it holds; give --overwrite to do so, "
             f"or an empty or new directory", 1)


def _check_target(amqp_url: str, exchange: str) -> None:
    from headrace.spark_bridge.amqp_publisher import AMQPError, ConfirmPublisher

    try:
        publisher = ConfirmPublisher(amqp_url, timeout=10).connect()
    except (OSError, AMQPError, ValueError) as exc:
        fail(f"cannot connect to the broker at {_safe_url(amqp_url)}: {exc}", 1)
    try:
        if not publisher.exchange_exists(exchange):
            fail(f"target exchange '{exchange}' does not exist at {_safe_url(amqp_url)}: declare it first, e.g. "
                 f"`headrace exchange declare {exchange} --type topic -a x-message-deduplication=true "
                 f"-a x-cache-size=100000`", 1)
    finally:
        publisher.close()


def _check_dedup(amqp_url: str, http_url: str | None, exchange: str, partitions: int, window: int,
                 header: str) -> None:
    """Refuses, in one line, a target whose dedup window would not drop a resume's re-sends."""
    import httpx

    from .replay_check import dedup_problem, target_api

    url, user, password, vhost = target_api(amqp_url, http_url)
    try:
        problem = dedup_problem(url, user, password, vhost, exchange, partitions=partitions, window=window,
                                header=header)
    except httpx.HTTPError as exc:
        fail(f"cannot check the target exchange's dedup window over the HTTP API at {url} ({exc}): give "
             f"--http-url, or --at-least-once to replay without that check", 1)
    if problem is not None:
        fail(problem, 1)


def _safe_url(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.hostname}:{u.port or 5672}{u.path or '/'}"


# Settings of the CLI's own session: a JVM that starts fast (serial GC, class data sharing), no UI
# and no console progress (ours is shown instead), shuffles over a few partitions, as a local job
# on one machine wants; ``--conf`` overrides any of them.
FAST_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -Xshare:auto",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
}


def spark_session(master: str, conf: tuple[str, ...]) -> Any:
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = dict(FAST_CONF)
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected k=v, got {item!r}", param_hint="--conf")
        settings[key] = value
    builder = SparkSession.builder.appName("headrace").master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not master.startswith("local"):
        spark.sparkContext.addPyFile(str(_executor_zip()))
    return spark


def _executor_zip() -> Path:
    """headrace's executor side as a zip (``spark_bridge/pyfiles``), for the executors of a cluster
    whose workers' Python has pyarrow but not headrace. Named by its content in one directory
    under the system's temp dir: Spark's file server sends it from there while the job runs, and a
    command killed with SIGKILL (a stream-bridge, say) leaves no copy of its own behind."""
    import hashlib
    import os
    import tempfile

    from headrace.spark_bridge.pyfiles import build_zip

    cache = Path(tempfile.gettempdir()) / f"headrace-pyfiles-{os.getuid()}"
    built = build_zip(cache / f"building-{os.getpid()}.zip")
    final = cache / f"headrace-{hashlib.sha256(built.read_bytes()).hexdigest()[:16]}.zip"
    built.replace(final)  # atomic: another command may be giving the same bytes the same name
    return final


def _with_progress(spark: Any, label: str, job: Callable[[], int]) -> int:
    """Runs ``job`` in a thread and shows the running Spark stages' finished/total partitions
    (Spark's status tracker), which says more than a spinner on a long export or replay."""
    result: list[int] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(job())
        except BaseException as exc:  # re-raised in the calling thread
            error.append(exc)

    thread = threading.Thread(target=run, name="spark-job", daemon=True)
    tracker = spark.sparkContext.statusTracker()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("partitions"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(label, total=None)
        thread.start()
        while thread.is_alive():
            thread.join(0.25)
            stages = [info for info in map(tracker.getStageInfo, tracker.getActiveStageIds()) if info is not None]
            if stages:
                progress.update(task, total=sum(s.numTasks for s in stages),
                                completed=sum(s.numCompletedTasks for s in stages))
    if error:
        raise error[0]
    return result[0]


def _bound(value: str | None) -> dict[str, Any]:
    """--from/--to: a number is an offset, anything else an ISO time."""
    return {} if value is None else ({"offset": int(value)} if value.isdigit() else {"time": value})


def _filters(start: str | None, end: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for prefix, value in (("from", start), ("to", end)):
        for kind, v in _bound(value).items():
            out[f"{prefix}_{kind}"] = v
    return out


spark_options = [
    click.option("--data-dir", default="headrace-data", show_default=True, help="The broker's data directory."),
    click.option("--exchange", help="A mirrored exchange's log."),
    click.option("--stream", help="A stream queue's log (instead of --exchange)."),
    click.option("--vhost", default="/", show_default=True),
    click.option("--from", "start", help="First offset, or ISO time."),
    click.option("--to", "end", help="Last offset (inclusive), or ISO time."),
    click.option("--master", default="local[*]", show_default=True),
    click.option("--conf", multiple=True, help="Spark configuration k=v (repeatable)."),
]


def _source(data_dir: str, exchange: str | None, stream: str | None) -> tuple[str, str]:
    """(root, log name): a stream queue's log lies under <data dir>/streams, in the mirror layout."""
    if (exchange is None) == (stream is None):
        raise click.UsageError("give one of --exchange or --stream")
    return (data_dir, exchange) if stream is None else (str(Path(data_dir) / "streams"), stream)  # type: ignore[return-value]


F = TypeVar("F", bound=Callable[..., Any])


def _with(options: list[Any]) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f
    return decorate


@click.command("replay")
@_with(spark_options)
@_with(remote_options)
@click.option("--routing-key", "pattern", help="Only keys matching this topic pattern.")
@click.option("--to-exchange", help="Publish to this exchange instead of the original.")
@click.option("--rate", type=float, help="Messages per second, overall (shared by the partitions that have rows).")
@click.option("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True)
@click.option("--progress-dir", help="Where confirmed offsets are kept (resume without duplicates); default: "
              "<data-dir>/replay-progress/<hash of the job's parameters>.")
@click.option("--partitions", type=click.IntRange(1), default=4, show_default=True,
              help="Publishing partitions (routing keys hashed over them), one connection each.")
@click.option("--window", type=click.IntRange(1), default=1000, show_default=True,
              help="Publisher confirms in flight per partition.")
@click.option("--dedup-header", default="x-deduplication-header", show_default=True,
              help="Header carrying <exchange>:<offset>, read by the target's x-message-deduplication window.")
@click.option("--http-url", help="The target broker's HTTP API, where the target's dedup window is checked "
              "(default: the --amqp-url host, port 15672, its credentials).")
@click.option("--at-least-once", is_flag=True, help="Replay into a target without a large enough dedup window: "
              "a resumed replay may then deliver messages twice.")
@click.option("--super-stream", help="A super stream's partition streams, one after another, each with its own "
              "progress (instead of --exchange); to the super stream's exchange unless --to-exchange.")
@click.pass_context
def replay_command(ctx: click.Context, data_dir: str, exchange: str | None, stream: str | None, vhost: str,
                   start: str | None, end: str | None, master: str, conf: tuple[str, ...], url: str | None,
                   user: str | None, password: str | None, ca_file: str | None, engine: str, pattern: str | None,
                   to_exchange: str | None, rate: float | None, amqp_url: str, progress_dir: str | None,
                   partitions: int, window: int, dedup_header: str, http_url: str | None, at_least_once: bool,
                   super_stream: str | None) -> None:
    """Publish a mirrored exchange's (or a stream's, or a super stream's) messages again, in order
    per routing key.

    Exactly once by default: the target exchange must have a dedup window of at least
    3 x partitions x window keys (checked first); --at-least-once skips that check."""
    _need_pyspark("replay")
    from headrace.spark_bridge.replay import replay
    from headrace.spark_bridge.sources import STREAMS_DIR, local_partitions

    remote: dict[str, str] | None = None
    size = 0
    if super_stream is not None:
        # a key lives in one partition, so replaying the partitions one after another keeps each
        # key's order; each keeps its progress apart (offsets of different streams do not compare)
        if exchange is not None or stream is not None:
            raise click.UsageError("give one of --exchange, --stream or --super-stream")
        if url is not None:
            raise click.UsageError("--super-stream replays from the broker's data directory (--data-dir), not --url")
        _check_super_stream(data_dir, vhost, super_stream)
        data_dir = str(Path(data_dir) / STREAMS_DIR)
        logs, name, to_exchange = local_partitions(Path(data_dir), vhost, super_stream), super_stream, \
            to_exchange or super_stream
    else:
        if stream is not None and to_exchange is None:
            raise click.UsageError("--stream needs --to-exchange (a stream is a queue, not an exchange)")
        remote = source_options(url, user, password, ca_file, data_dir, "exchange" if stream is None else "stream",
                                str(exchange or stream)) if url else None
        data_dir, name = _source(data_dir, exchange, stream)
        if remote is not None:
            size = check_remote(remote, vhost, f"the log of '{name}'")
        else:
            _check_log(data_dir, vhost, name, stream is not None)
        logs = [name]
    chosen = choose_engine(engine, lambda: size if remote else sum(
        local_bytes({"path": data_dir, "exchange": log}, vhost) for log in logs), spark_asked(ctx))
    _check_target(amqp_url, to_exchange or name)
    if at_least_once:
        console.print("replaying at least once: a resumed replay may deliver messages twice (--at-least-once)")
    else:
        _check_dedup(amqp_url, http_url, to_exchange or name, partitions, window, dedup_header)

    filters = _filters(start, end)

    def log_progress(log: str) -> str | None:
        return str(Path(progress_dir) / log) if progress_dir and super_stream else progress_dir

    if chosen == "arrow":
        from headrace.spark_bridge.arrow_jobs import replay_arrow, source_of
        from headrace.spark_bridge.replay import progress_path

        def replay_log(log: str) -> int:
            target = to_exchange or log
            options = remote or {"path": data_dir, "exchange": log}
            progress = progress_path(data_dir, log_progress(log), exchange=log, vhost=vhost, to_exchange=target,
                                     amqp_url=amqp_url, routing_key_pattern=pattern, filters=filters, source_url=url)
            return replay_arrow(
                source_of(options, vhost, filters), progress=progress, amqp_url=amqp_url, exchange=log,
                to_exchange=target, routing_key_pattern=pattern, rate=rate, partitions=partitions, window=window,
                dedup_header=dedup_header, from_offset=filters.get("from_offset"), to_offset=filters.get("to_offset"))

        count = run_arrow(console, f"replaying {name}", lambda: sum(replay_log(log) for log in logs))
        console.print(f"replayed {count} messages (pyarrow)")
        return
    with console.status("starting Spark ..."):
        spark = spark_session(master, conf)
    count = _with_progress(spark, f"replaying {name}", lambda: sum(replay(
        spark, data_dir, log, amqp_url=amqp_url, vhost=vhost, to_exchange=to_exchange,
        routing_key_pattern=pattern, rate=rate, progress_dir=log_progress(log), partitions=partitions,
        window=window, dedup_header=dedup_header, source=remote, **filters) for log in logs))
    console.print(f"replayed {count} messages")


@click.command("export")
@_with(spark_options)
@_with(remote_options)
@click.option("--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet", show_default=True)
@click.option("--out", required=True, help="Output directory.")
@click.option("--partition-by", type=click.Choice(["date", "routing_key"]))
@click.option("--overwrite", is_flag=True, help="Replace what the output directory holds.")
@click.option("--super-stream", help="A super stream's partition streams, as one table (instead of --exchange).")
@click.pass_context
def export_command(ctx: click.Context, data_dir: str, exchange: str | None, stream: str | None, vhost: str,
                   start: str | None, end: str | None, master: str, conf: tuple[str, ...], url: str | None,
                   user: str | None, password: str | None, ca_file: str | None, engine: str, fmt: str, out: str,
                   partition_by: str | None, overwrite: bool, super_stream: str | None) -> None:
    """Write a mirrored exchange's, a stream's or a super stream's log as Parquet or JSON."""
    _need_pyspark("export")
    from headrace.spark_bridge.export import export

    source: dict[str, str] | None = None
    size = 0
    if super_stream is not None and (exchange is not None or stream is not None):
        raise click.UsageError("give one of --exchange, --stream or --super-stream")
    if url is not None:
        key = "superStream" if super_stream else "stream" if stream else "exchange"
        if super_stream is None and (exchange is None) == (stream is None):
            raise click.UsageError("give one of --exchange, --stream or --super-stream")
        exchange = str(super_stream or stream or exchange)
        source = source_options(url, user, password, ca_file, data_dir, key, exchange)
        size = check_remote(source, vhost, f"the log of '{exchange}'")
    elif super_stream is not None:
        source = {"path": data_dir, "superStream": super_stream}
        exchange = super_stream
        _check_super_stream(data_dir, vhost, super_stream)
    else:
        data_dir, exchange = _source(data_dir, exchange, stream)
        _check_log(data_dir, vhost, exchange, stream is not None)
    _check_out(out, overwrite)
    options = source or {"path": data_dir, "exchange": exchange}
    if choose_engine(engine, lambda: size if url else local_bytes(options, vhost), spark_asked(ctx)) == "arrow":
        from headrace.spark_bridge.arrow_jobs import export_arrow, source_of

        count = run_arrow(console, f"exporting {exchange} to {out}", lambda: export_arrow(
            source_of(options, vhost, _filters(start, end)), out=out, fmt=fmt, partition_by=partition_by))
        console.print(f"exported {count} rows to {out} (pyarrow)")
        return
    with console.status("starting Spark ..."):
        spark = spark_session(master, conf)
    count = _with_progress(spark, f"exporting {exchange} to {out}", lambda: export(
        spark, data_dir, exchange, out=out, fmt=fmt, vhost=vhost, partition_by=partition_by, source=source,
        **_filters(start, end)))
    console.print(f"exported {count} rows to {out}")
