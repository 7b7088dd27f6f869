"""Management commands for the topology: overview, exchanges, queues and bindings.

Thin wrappers of the broker's HTTP API (RabbitMQ's paths) through ``client.Client``.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import click

from .client import Client, console, fail, kv_pairs, pass_client
__all__ = ["bind", "exchange", "overview", "queue", "unbind"]


@click.command()
@pass_client
def overview(c: Client) -> None:
    """Broker totals, alarms and versions."""
    data = c.call("GET", "/api/overview")
    if c.as_json:
        console.print_json(json.dumps(data))
        return
    console.print(f"[bold]{data['product_name']} {data['product_version']}[/bold]  alarms: {data['alarms'] or 'none'}")
    c.show([{**data["object_totals"], **data["queue_totals"]}],
           ["connections", "channels", "exchanges", "queues", "consumers", "messages", "messages_ready",
            "messages_unacknowledged"])


@click.group()
def exchange() -> None:
    """List, declare and delete exchanges."""


@exchange.command("list")
@pass_client
def exchange_list(c: Client) -> None:
    c.show(c.call("GET", f"/api/exchanges/{c.v}"), ["name", "type", "durable", "auto_delete", "internal", "mirrored"])


@exchange.command("declare")
@click.argument("name")
@click.option("--type", "type_", default="direct", show_default=True)
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--internal", is_flag=True)
@click.option("--argument", "-a", multiple=True, help="x-argument as key=value (JSON values allowed).")
@pass_client
def exchange_declare(c: Client, name: str, type_: str, durable: bool, auto_delete: bool, internal: bool,
                     argument: tuple[str, ...]) -> None:
    c.call("PUT", f"/api/exchanges/{c.v}/{quote(name, safe='')}",
           {"type": type_, "durable": durable, "auto_delete": auto_delete, "internal": internal,
            "arguments": kv_pairs(argument)})
    c.done(f"exchange {name} declared", "declared", exchange=name)


@exchange.command("delete")
@click.argument("name")
@pass_client
def exchange_delete(c: Client, name: str) -> None:
    c.call("DELETE", f"/api/exchanges/{c.v}/{quote(name, safe='')}")
    c.done(f"exchange {name} deleted", "deleted", exchange=name)


@click.group()
def queue() -> None:
    """List, declare, delete and purge queues."""


@queue.command("list")
@pass_client
def queue_list(c: Client) -> None:
    """Queues of every vhost the user can see (rabbitmqctl list_queues per vhost, all at once here);
    --vhost (or HEADRACE_VHOST) keeps one vhost's."""
    path = f"/api/queues/{c.v}" if c.vhost_given else "/api/queues"
    c.show(c.call("GET", path),
           ["vhost", "name", "type", "durable", "messages_ready", "messages_unacknowledged", "consumers", "spilled"])


@queue.command("stream")
@click.argument("name")
@pass_client
def queue_stream(c: Client, name: str) -> None:
    """A stream queue's log (size, first/last offset and time) and each consumer's offset and lag."""
    q = c.call("GET", f"/api/queues/{c.v}/{quote(name, safe='')}")
    info = q.get("stream")
    if info is None:
        fail(f"queue '{name}' is a {q.get('type')} queue, not a stream", 1)
    if c.as_json:
        click.echo(json.dumps(info))
        return
    for key in ("size_on_disk", "segments", "first_offset", "first_timestamp", "last_offset", "last_timestamp"):
        console.print(f"{key}: {info[key]}", markup=False, highlight=False)
    c.show(info["consumers"], ["consumer_tag", "name", "offset", "lag", "single_active_group", "active"])


@queue.command("declare")
@click.argument("name")
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--type", "type_", type=click.Choice(["classic", "quorum", "stream"]),
              help="Queue type (x-queue-type) [classic].")
@click.option("--argument", "-a", multiple=True, help="x-argument as key=value (JSON values allowed).")
@pass_client
def queue_declare(c: Client, name: str, durable: bool, auto_delete: bool, type_: str | None,
                  argument: tuple[str, ...]) -> None:
    arguments = kv_pairs(argument)
    if type_ is not None:
        if arguments.get("x-queue-type", type_) != type_:
            raise click.UsageError(f"--type {type_} and -a x-queue-type={arguments['x-queue-type']} disagree")
        arguments["x-queue-type"] = type_
    c.call("PUT", f"/api/queues/{c.v}/{quote(name, safe='')}",
           {"durable": durable, "auto_delete": auto_delete, "arguments": arguments})
    c.done(f"queue {name} declared", "declared", queue=name)


@queue.command("delete")
@click.argument("name")
@pass_client
def queue_delete(c: Client, name: str) -> None:
    c.call("DELETE", f"/api/queues/{c.v}/{quote(name, safe='')}")
    c.done(f"queue {name} deleted", "deleted", queue=name)


@queue.command("purge")
@click.argument("name")
@pass_client
def queue_purge(c: Client, name: str) -> None:
    c.call("DELETE", f"/api/queues/{c.v}/{quote(name, safe='')}/contents")
    c.done(f"queue {name} purged", "purged", queue=name)


@click.command()
@click.argument("source")
@click.argument("destination")
@click.option("--routing-key", "-k", default="")
@click.option("--to-exchange", is_flag=True, help="DESTINATION is an exchange.")
@click.option("--argument", "-a", multiple=True)
@pass_client
def bind(c: Client, source: str, destination: str, routing_key: str, to_exchange: bool, argument: tuple[str, ...]) -> None:
    """Bind SOURCE exchange to DESTINATION queue (or exchange)."""
    letter = "e" if to_exchange else "q"
    c.call("POST", f"/api/bindings/{c.v}/e/{quote(source, safe='')}/{letter}/{quote(destination, safe='')}",
           {"routing_key": routing_key, "arguments": kv_pairs(argument)})
    c.done(f"bound {source} -> {destination} ({routing_key!r})", "bound", source=source,
           destination=destination, routing_key=routing_key)


@click.command()
@click.argument("source")
@click.argument("destination")
@click.option("--routing-key", "-k", default="")
@click.option("--to-exchange", is_flag=True)
@pass_client
def unbind(c: Client, source: str, destination: str, routing_key: str, to_exchange: bool) -> None:
    """Remove the bindings from SOURCE to DESTINATION with that routing key."""
    kind = "exchange" if to_exchange else "queue"
    found = [b for b in c.call("GET", f"/api/bindings/{c.v}")
             if b["source"] == source and b["destination"] == destination and b["destination_type"] == kind
             and b["routing_key"] == routing_key]
    if not found:
        fail("no such binding", 1)
    for b in found:
        c.call("DELETE", f"/api/bindings/{c.v}/e/{quote(source, safe='')}/{kind[0]}/{quote(destination, safe='')}/"
                         f"{quote(b['properties_key'], safe='')}")
    c.done(f"unbound {source} -> {destination}", "unbound", source=source, destination=destination,
           routing_key=routing_key)
