"""Which log an ``export`` or ``replay`` reads, from where, and which engine runs it.

The log is the broker's data directory's (``--data-dir``) or, with ``--url``, the broker's HTTP
API's, read as the Spark source reads it with the ``url`` option (``--user``, ``--password``,
``--ca-file``; the connection options of every other command, and their ``HEADRACE_*`` variables).

``--engine auto`` (the default) runs a job on pyarrow in this process (``spark_bridge/arrow_jobs``)
when its logs hold at most ``ARROW_MAX_BYTES`` and neither ``--master`` nor ``--conf`` asks for
Spark; otherwise, or with ``--engine spark``, on Spark. ``--engine arrow`` forces the pyarrow path
whatever the size. The output is the same either way; only the time differs: a small job on
pyarrow ends before a JVM would have started.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .client import fail

__all__ = ["ENGINES", "choose_engine", "remote_options", "source_options"]

ENGINES = ("auto", "arrow", "spark")

remote_options = [
    click.option("--url", help="Read the log over the broker's HTTP API (http[s]://host:port) instead of --data-dir."),
    click.option("--user", help="HTTP API user with --url (HEADRACE_USER) [guest]."),
    click.option("--password", help="Its password (HEADRACE_PASSWORD) [guest]."),
    click.option("--ca-file", type=click.Path(exists=True, dir_okay=False),
                 help="CA bundle of the broker's certificate, for an https --url."),
    click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
                 help="pyarrow in this process (arrow) or Spark; auto: arrow for a log of at most 256 MiB "
                      "unless --master or --conf is given."),
]


def source_options(url: str | None, user: str | None, password: str | None, ca_file: str | None, data_dir: str,
                   key: str, name: str) -> dict[str, str]:
    """The ``headrace`` source's options naming the log (``key``: exchange, stream or superStream)."""
    if url is None:
        return {"path": data_dir, key: name}
    return {"url": url, "user": user or os.environ.get("HEADRACE_USER") or "guest",
            "password": password or os.environ.get("HEADRACE_PASSWORD") or "guest",
            **({"caFile": ca_file} if ca_file else {}), key: name}


def check_remote(options: dict[str, str], vhost: str, what: str) -> int:
    """The log's size over the API; one line and exit 1 when it cannot be read."""
    from headrace.spark_bridge.sources import Source

    try:
        return Source.parse({**options, "vhost": vhost}).total_bytes()
    except (PermissionError, LookupError, ConnectionError, ValueError, OSError) as exc:
        fail(f"cannot read {what} over {options['url']}: {exc}", 1)
    raise AssertionError("unreachable")


def local_bytes(options: dict[str, str], vhost: str) -> int:
    from headrace.spark_bridge.sources import Source

    return Source.parse({**options, "vhost": vhost}).total_bytes()


def choose_engine(engine: str, size: Callable[[], int], spark_asked: bool) -> str:
    """``arrow`` or ``spark`` (module docstring)."""
    if engine != "auto":
        return engine
    from headrace.spark_bridge.arrow_jobs import ARROW_MAX_BYTES

    return "spark" if spark_asked or size() > ARROW_MAX_BYTES else "arrow"


def spark_asked(ctx: click.Context) -> bool:
    """``--master`` or ``--conf`` given: the user wants Spark (a cluster, a setting)."""
    return any(ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)
               for name in ("master", "conf"))


def progress_root(data_dir: str) -> Path:
    return Path(data_dir) / "replay-progress"


def run_arrow(console: Any, label: str, job: Callable[[], int]) -> int:
    with console.status(f"{label} (pyarrow) ..."):
        return job()
