"""The ``headrace`` command: ``serve`` runs the broker; the other commands talk to a running broker
over its HTTP API (see ``commands``) or run Spark jobs (``spark_commands``, optional extra)."""

from __future__ import annotations

from pathlib import Path

import click

import headrace

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(headrace.__version__, prog_name="headrace")
def cli(**global_opts: object) -> None:
    """headrace: an AMQP 0-9-1 message broker with an HTTP API and a Spark bridge."""
    # the management commands' options given before the subcommand (``client.global_options``)
    click.get_current_context().meta["headrace.global"] = global_opts


@cli.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False),
              help="TOML settings file (also HEADRACE_CONFIG).")
@click.option("--amqp-host", help="AMQP listen address [127.0.0.1].")
@click.option("--amqp-port", type=int, help="AMQP port [5672]; 0 picks a free one.")
@click.option("--http-host", help="HTTP API listen address [127.0.0.1].")
@click.option("--http-port", type=int, help="HTTP API port [15672]; 0 picks a free one.")
@click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), help="Data directory [./headrace-data].")
@click.option("--ports-file", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the bound ports here as JSON once listening.")
@click.option("--fsync", type=click.Choice(["batch", "always", "off"]), help="Message store fsync policy [batch].")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--rabbitmq-compat", help="RabbitMQ release whose semantics to follow: 3.10 (default), 4.0 to 4.3.")
@click.option("--node-name", help="This node's name in a cluster [headrace@localhost].")
@click.option("--cluster-etcd-endpoints", help="etcd client URLs, comma-separated: run as a cluster node.")
@click.option("--cluster-id", help="The cluster's key prefix in etcd [default].")
@click.option("--cluster-port", type=int, help="The replication listener's port [25672].")
def serve(config_file: Path | None, **flags: object) -> None:
    """Run the broker in the foreground (SIGINT/SIGTERM stop it gracefully)."""
    from .serving import run_broker

    run_broker(config_file, **flags)


def _add_optional_commands() -> None:
    try:
        from . import commands
    except ImportError:
        commands = None  # type: ignore[assignment]
    if commands is not None:
        commands.register(cli)
    try:
        from .spark_commands import export_command, replay_command
    except ImportError:
        return
    cli.add_command(replay_command, "replay")
    cli.add_command(export_command, "export")
    from .stream_bridge import stream_bridge_command

    cli.add_command(stream_bridge_command, "stream-bridge")


_add_optional_commands()


def main() -> None:
    cli(prog_name="headrace")


if __name__ == "__main__":  # pragma: no cover
    main()
