"""Management commands for administration: definitions, connections, users, vhosts, permissions, mirrors.

Thin wrappers of the broker's HTTP API (RabbitMQ's paths) through ``client.Client``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import click

from .client import Client, fail, pass_client, reason_of
__all__ = ["connections", "definitions", "mirror", "permissions", "user", "vhost"]


@click.group()
def definitions() -> None:
    """Export or import definitions (RabbitMQ's JSON format)."""


@definitions.command("export")
@click.argument("path", type=click.File("w"), default="-")
@pass_client
def definitions_export(c: Client, path: Any) -> None:
    """Write the definitions to PATH (stdout with -) and say what was written: the path and the
    count of each kind (on stderr when the JSON itself goes to stdout)."""
    doc = c.call("GET", "/api/definitions")
    json.dump(doc, path, indent=2)
    path.write("\n")
    path.flush()
    counts = {kind: len(doc.get(kind) or []) for kind in _DEFINITION_KINDS}
    where = "stdout" if path.name == "<stdout>" else path.name
    summary = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())
    if c.as_json and where != "stdout":
        click.echo(json.dumps({"action": "exported", "path": where, **counts}))
    else:
        click.echo(f"exported definitions to {where}: {summary}", err=where == "stdout")


_DEFINITION_KINDS = ("users", "vhosts", "permissions", "topic_permissions", "queues", "exchanges", "bindings",
                     "policies", "parameters", "global_parameters")


@definitions.command("import")
@click.argument("path", type=click.File("r"))
@pass_client
def definitions_import(c: Client, path: Any) -> None:
    try:
        doc = json.load(path)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PATH") from None
    c.call("POST", "/api/definitions", doc)
    c.done("definitions imported", "imported")


@click.group()
def connections() -> None:
    """AMQP connections."""


@connections.command("list")
@pass_client
def connections_list(c: Client) -> None:
    c.show(c.call("GET", "/api/connections"), ["name", "user_provided_name", "user", "vhost", "channels", "id"])


@connections.command("close")
@click.argument("connection")
@click.option("--reason", default="Closed via the headrace CLI")
@pass_client
def connections_close(c: Client, connection: str, reason: str) -> None:
    """Close CONNECTION: its name as `connections list` shows it (`127.0.0.1:39884 -> 127.0.0.1:5672`,
    as rabbitmqctl close_connection takes it), the name its client gave, or its id."""
    conns = c.call("GET", "/api/connections") or []
    found = [x for x in conns if connection in (x.get("name"), str(x.get("id")))]
    if not found:
        found = [x for x in conns if x.get("user_provided_name") == connection]
    if len(found) > 1:
        fail(f"{len(found)} connections are named '{connection}': close one by its name "
             f"({', '.join(str(x['name']) for x in found)})", 1)
    if not found:
        fail(f"no connection '{connection}' (see `headrace connections list`)", 1)
    name = str(found[0]["name"])
    r = c.http.request("DELETE", f"/api/connections/{quote(name, safe='')}", headers={"x-reason": reason})
    if r.status_code >= 400:
        fail(f"{reason_of(r)} (HTTP {r.status_code})", 1)
    c.done(f"connection {name} closed", "closed", connection=name)


@click.group()
def user() -> None:
    """Users (administrator only)."""


@user.command("list")
@pass_client
def user_list(c: Client) -> None:
    c.show(c.call("GET", "/api/users"), ["name", "tags"])


@user.command("add")
@click.argument("name")
@click.option("--new-password", prompt=True, hide_input=True, confirmation_prompt=True)
@click.option("--tags", default="", help="Comma-separated: administrator, management, monitoring, policymaker.")
@click.option("--update", is_flag=True, help="Change the password and tags of an existing user.")
@pass_client
def user_add(c: Client, name: str, new_password: str, tags: str, update: bool) -> None:
    """Add a user; an existing one is refused (rabbitmqctl add_user's habit) unless --update."""
    exists = any(u["name"] == name for u in c.call("GET", "/api/users"))
    if exists and not update:
        fail(f"user '{name}' already exists (--update changes its password and tags)", 1)
    c.call("PUT", f"/api/users/{quote(name, safe='')}", {"password": new_password, "tags": tags})
    if exists:
        c.done(f"user {name} updated", "updated", user=name)
    else:
        c.done(f"user {name} added", "added", user=name)


@user.command("passwd")
@click.argument("name")
@click.option("--new-password", prompt=True, hide_input=True, confirmation_prompt=True)
@pass_client
def user_passwd(c: Client, name: str, new_password: str) -> None:
    users = {u["name"]: u for u in c.call("GET", "/api/users")}
    if name not in users:
        fail(f"no user '{name}'", 1)
    c.call("PUT", f"/api/users/{quote(name, safe='')}", {"password": new_password, "tags": users[name]["tags"]})
    c.done(f"password of {name} changed", "password_changed", user=name)


@user.command("delete")
@click.argument("name")
@pass_client
def user_delete(c: Client, name: str) -> None:
    c.call("DELETE", f"/api/users/{quote(name, safe='')}")
    c.done(f"user {name} deleted", "deleted", user=name)


@click.group()
def vhost() -> None:
    """Virtual hosts."""


@vhost.command("list")
@pass_client
def vhost_list(c: Client) -> None:
    c.show(c.call("GET", "/api/vhosts"), ["name", "messages", "tracing"])


@vhost.command("add")
@click.argument("name")
@pass_client
def vhost_add(c: Client, name: str) -> None:
    c.call("PUT", f"/api/vhosts/{quote(name, safe='')}")
    c.done(f"vhost {name} added", "added", name=name)


@vhost.command("trace")
@click.argument("name")
@click.argument("state", type=click.Choice(["on", "off"]))
@pass_client
def vhost_trace(c: Client, name: str, state: str) -> None:
    """Switch the firehose tracer of a vhost (rabbitmqctl trace_on / trace_off): copies of its
    publishes and deliveries go to its amq.rabbitmq.trace exchange. Off again at every start."""
    path = f"/api/vhosts/{quote(name, safe='')}"
    c.call("GET", path)  # an unknown vhost is an error here (404), not created by the PUT
    c.call("PUT", path, {"tracing": state == "on"})
    c.done(f"tracing {state} for vhost {name}", "tracing", name=name, tracing=state == "on")


@vhost.command("delete")
@click.argument("name")
@pass_client
def vhost_delete(c: Client, name: str) -> None:
    c.call("DELETE", f"/api/vhosts/{quote(name, safe='')}")
    c.done(f"vhost {name} deleted", "deleted", name=name)


@click.group()
def permissions() -> None:
    """Per-vhost configure/write/read permissions."""


@permissions.command("list")
@pass_client
def permissions_list(c: Client) -> None:
    c.show(c.call("GET", "/api/permissions"), ["user", "vhost", "configure", "write", "read"])


@permissions.command("set")
@click.argument("user_name", metavar="USER")
@click.argument("patterns", nargs=-1, metavar="[CONF WRITE READ]")
@click.option("--configure", help="[.*]")
@click.option("--write", help="[.*]")
@click.option("--read", help="[.*]")
@pass_client
def permissions_set(c: Client, user_name: str, patterns: tuple[str, ...], configure: str | None, write: str | None,
                    read: str | None) -> None:
    """Set USER's permissions on the vhost: positionally as rabbitmqctl set_permissions takes them
    (`permissions set alice '^alice-' '.*' '.*'`), or with --configure/--write/--read (each .* if left out)."""
    if patterns:
        if len(patterns) != 3:
            raise click.UsageError(f"expected CONF WRITE READ (3 patterns), got {len(patterns)}")
        if configure is not None or write is not None or read is not None:
            raise click.UsageError("give the patterns positionally or with --configure/--write/--read, not both")
        configure, write, read = patterns
    configure, write, read = (".*" if p is None else p for p in (configure, write, read))
    c.call("PUT", f"/api/permissions/{c.v}/{quote(user_name, safe='')}",
           {"configure": configure, "write": write, "read": read})
    c.done(f"permissions of {user_name} on {c.vhost} set", "set", user=user_name)


@permissions.command("clear")
@click.argument("user_name", metavar="USER")
@pass_client
def permissions_clear(c: Client, user_name: str) -> None:
    c.call("DELETE", f"/api/permissions/{c.v}/{quote(user_name, safe='')}")
    c.done(f"permissions of {user_name} on {c.vhost} cleared", "cleared", user=user_name)


@click.group()
def mirror() -> None:
    """Mirror exchanges into the replayable log read by the Spark bridge."""


@mirror.command("list")
@pass_client
def mirror_list(c: Client) -> None:
    c.show(c.call("GET", "/api/mirrors"), ["vhost", "exchange", "max_age_ms", "max_bytes"])


@mirror.command("enable")
@click.argument("exchange_name", metavar="EXCHANGE")
@click.option("--max-age-ms", type=int)
@click.option("--max-bytes", type=int)
@pass_client
def mirror_enable(c: Client, exchange_name: str, max_age_ms: int | None, max_bytes: int | None) -> None:
    c.call("PUT", f"/api/mirrors/{c.v}/{quote(exchange_name, safe='')}", {"max_age_ms": max_age_ms, "max_bytes": max_bytes})
    c.done(f"mirroring {exchange_name}", "mirrored", exchange=exchange_name)


@mirror.command("disable")
@click.argument("exchange_name", metavar="EXCHANGE")
@pass_client
def mirror_disable(c: Client, exchange_name: str) -> None:
    c.call("DELETE", f"/api/mirrors/{c.v}/{quote(exchange_name, safe='')}")
    c.done(f"not mirroring {exchange_name}", "unmirrored", exchange=exchange_name)
