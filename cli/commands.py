"""Management commands: a thin client of the broker's HTTP API (RabbitMQ's paths), output via rich.

Exit codes: 0 ok, 1 the broker refused (its ``reason`` is printed), 2 usage error (click),
3 broker unreachable.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn
from urllib.parse import quote

import click
import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

__all__ = ["register"]

console = Console()
BATCH = 1000  # messages per publish-batch request
err = Console(stderr=True)


class Client:
    def __init__(self, url: str, user: str, password: str, vhost: str, as_json: bool) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), auth=(user, password), timeout=30)
        self.vhost = vhost
        self.as_json = as_json

    @property
    def v(self) -> str:
        return quote(self.vhost, safe="")

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            r = self.http.request(method, path, json=body, params=params)
        except httpx.TransportError as exc:
            fail(f"cannot reach the broker at {self.http.base_url}: {exc}", 3)
        if r.status_code >= 400:
            try:
                reason = r.json().get("reason", r.text)
            except ValueError:
                reason = r.text
            fail(f"{reason} (HTTP {r.status_code})", 1)
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None

    def done(self, text: str, action: str, **result: Any) -> None:
        """Report a change: one line of text, or with --json an object (action, vhost and the names)."""
        if self.as_json:
            click.echo(json.dumps({"action": action, "vhost": self.vhost, **result}))
        else:
            console.print(text, markup=False, highlight=False)

    def show(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        if self.as_json:
            console.print_json(json.dumps(rows, default=str))
            return
        table = Table(*columns)
        for row in rows:
            table.add_row(*(str(row.get(c, "")) for c in columns))
        console.print(table)


pass_client = click.make_pass_decorator(Client)


def fail(message: str, code: int) -> NoReturn:
    """One plain line on stderr (no rich wrapping or [markup] parsing: reasons quote names verbatim)."""
    click.echo("Error: " + " ".join(message.split()), err=True)
    sys.exit(code)


def _reason(r: httpx.Response) -> str:
    try:
        return str(r.json().get("reason", r.text))
    except (ValueError, AttributeError):
        return r.text


def _kv(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def register(cli: click.Group) -> None:
    from .policy_commands import policy

    for command in (overview, exchange, queue, bind, unbind, publish, get, consume, definitions, connections, user,
                    vhost, permissions, mirror, policy):
        _add_connection_options(command)
        cli.add_command(command)


def _cli_config() -> dict[str, str]:
    """Defaults from a TOML file (``HEADRACE_CLI_CONFIG``, else ~/.config/headrace/cli.toml) with
    keys url, user, password, vhost; flags and environment variables take precedence."""
    import os
    import tomllib
    from pathlib import Path

    path = Path(os.environ.get("HEADRACE_CLI_CONFIG", Path.home() / ".config" / "headrace" / "cli.toml"))
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("url", "user", "password", "vhost")}


def _add_connection_options(command: click.Command) -> None:
    """Every leaf command takes --url/--user/--password/--vhost/--json and builds the client."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_connection_options(sub)
        return
    command.params.extend([
        click.Option(["--url"], envvar="HEADRACE_URL", default=lambda: _cli_config().get("url", "http://127.0.0.1:15672"),
                     show_default="http://127.0.0.1:15672", help="HTTP API of the broker."),
        click.Option(["--user"], envvar="HEADRACE_USER", default=lambda: _cli_config().get("user", "guest"),
                     show_default="guest"),
        click.Option(["--password"], envvar="HEADRACE_PASSWORD", default=lambda: _cli_config().get("password", "guest")),
        click.Option(["--vhost"], envvar="HEADRACE_VHOST", default=lambda: _cli_config().get("vhost", "/"), show_default="/"),
        click.Option(["--json", "as_json"], is_flag=True, help="Machine-readable output."),
    ])
    callback = command.callback
    assert callback is not None

    def wrapped(url: str, user: str, password: str, vhost: str, as_json: bool, **kw: Any) -> Any:
        click.get_current_context().obj = Client(url, user, password, vhost, as_json)
        return callback(**kw)

    command.callback = wrapped


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
            "arguments": _kv(argument)})
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
    c.show(c.call("GET", f"/api/queues/{c.v}"),
           ["name", "type", "durable", "messages_ready", "messages_unacknowledged", "consumers", "spilled"])


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
    c.show(info["consumers"], ["consumer_tag", "name", "offset", "lag"])


@queue.command("declare")
@click.argument("name")
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--argument", "-a", multiple=True, help="x-argument as key=value (JSON values allowed).")
@pass_client
def queue_declare(c: Client, name: str, durable: bool, auto_delete: bool, argument: tuple[str, ...]) -> None:
    c.call("PUT", f"/api/queues/{c.v}/{quote(name, safe='')}",
           {"durable": durable, "auto_delete": auto_delete, "arguments": _kv(argument)})
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
           {"routing_key": routing_key, "arguments": _kv(argument)})
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


@click.command()
@click.argument("exchange_name", metavar="EXCHANGE")
@click.argument("body", required=False)
@click.option("--routing-key", "-k", default="")
@click.option("--property", "-p", "props", multiple=True, help="Message property key=value (delivery_mode=2 ...).")
@click.option("--header", "-H", multiple=True, help="Header key=value.")
@click.option("--stdin-lines", is_flag=True, help="Publish each line of stdin as one message.")
@click.option("--file", "ndjson", type=click.File("r"), help="NDJSON file: {routing_key, payload, properties}.")
@pass_client
def publish(c: Client, exchange_name: str, body: str | None, routing_key: str, props: tuple[str, ...],
            header: tuple[str, ...], stdin_lines: bool, ndjson: Any) -> None:
    """Publish a message (or many) to EXCHANGE ("" or amq.default is the default exchange)."""
    properties = _kv(props)
    if header:
        properties["headers"] = _kv(header)
    name = quote(exchange_name or "amq.default", safe="")
    messages: list[dict[str, Any]]
    if ndjson is not None:
        messages = []
        for n, line in enumerate(ndjson, 1):
            if line.strip():
                try:
                    messages.append(json.loads(line))
                except ValueError as exc:
                    raise click.BadParameter(f"line {n}: {exc}", param_hint="--file") from None
    elif stdin_lines:
        messages = [{"routing_key": routing_key, "payload": line.rstrip("\n"), "properties": properties}
                    for line in sys.stdin]
    else:
        if body is None:
            raise click.UsageError("give a BODY, --stdin-lines or --file")
        messages = [{"routing_key": routing_key, "payload": body, "properties": properties}]
    routed = unconfirmed = 0
    with Progress(console=err, transient=True, disable=len(messages) < 100) as progress:
        task = progress.add_task("publishing", total=len(messages))
        for start in range(0, len(messages), BATCH):  # publish-batch: one request per BATCH messages
            chunk = messages[start:start + BATCH]
            for message in chunk:
                message.setdefault("routing_key", routing_key)
                message.setdefault("properties", properties)
            body = "\n".join(json.dumps(m) for m in chunk)
            try:
                r = c.http.post(f"/api/exchanges/{c.v}/{name}/publish-batch", content=body,
                                headers={"content-type": "application/x-ndjson"})
            except httpx.TransportError as exc:
                fail(f"cannot reach the broker at {c.http.base_url}: {exc}", 3)
            if r.status_code >= 400:
                fail(f"{_reason(r)} (HTTP {r.status_code})", 1)
            results = r.json()["results"]
            routed += sum(1 for x in results if x["routed"])
            unconfirmed += sum(1 for x in results if not x.get("confirmed", True))
            progress.advance(task, len(chunk))
    c.done(f"published {len(messages)}, routed {routed}", "published", exchange=exchange_name,
           published=len(messages), routed=routed, unconfirmed=unconfirmed)
    if unconfirmed:  # the broker refused some (a full queue with reject-publish, a limit): not delivered
        fail(f"{unconfirmed} of {len(messages)} messages were not confirmed by the broker", 1)


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option("--count", "-n", default=1, show_default=True)
@click.option("--requeue/--ack", default=True, show_default=True, help="Put the messages back, or remove them.")
@pass_client
def get(c: Client, queue_name: str, count: int, requeue: bool) -> None:
    """Fetch messages from QUEUE."""
    rows = c.call("POST", f"/api/queues/{c.v}/{quote(queue_name, safe='')}/get",
                  {"count": count, "ackmode": "ack_requeue_true" if requeue else "ack_requeue_false"})
    c.show(rows, ["routing_key", "redelivered", "payload_encoding", "payload"])


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option("--count", "-n", type=int, help="Stop after this many messages.")
@click.option("--prefetch", default=10, show_default=True)
@click.option("--requeue", is_flag=True, help="Give each message back after printing it (nack with requeue).")
@pass_client
def consume(c: Client, queue_name: str, count: int | None, prefetch: int, requeue: bool) -> None:
    """Stream messages from QUEUE to stdout (one JSON line each), acking each after it is printed."""
    seen = 0
    path = f"/api/queues/{c.v}/{quote(queue_name, safe='')}/consume"
    try:
        with c.http.stream("GET", path, params={"prefetch": prefetch}, timeout=None) as r:
            if r.status_code >= 400:
                r.read()
                fail(f"{_reason(r)} (HTTP {r.status_code})", 1)
            lines = r.iter_lines()
            tag = json.loads(next(lines))["consumer"]
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                click.echo(json.dumps(event) if c.as_json else event["payload"])
                c.call("POST", f"/api/consumers/{tag}/settle",
                       {"delivery_ids": [event["delivery_id"]], "action": "nack" if requeue else "ack",
                        "requeue": True})
                seen += 1
                if count is not None and seen >= count:
                    return
    except httpx.TransportError as exc:
        fail(f"cannot reach the broker at {c.http.base_url}: {exc}", 3)


@click.group()
def definitions() -> None:
    """Export or import definitions (RabbitMQ's JSON format)."""


@definitions.command("export")
@click.argument("path", type=click.File("w"), default="-")
@pass_client
def definitions_export(c: Client, path: Any) -> None:
    json.dump(c.call("GET", "/api/definitions"), path, indent=2)
    path.write("\n")


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
    c.show(c.call("GET", "/api/connections"), ["id", "user", "vhost", "peer_host", "peer_port", "channels"])


@connections.command("close")
@click.argument("connection_id")
@click.option("--reason", default="Closed via the headrace CLI")
@pass_client
def connections_close(c: Client, connection_id: str, reason: str) -> None:
    r = c.http.request("DELETE", f"/api/connections/{quote(connection_id, safe='')}", headers={"x-reason": reason})
    if r.status_code >= 400:
        fail(f"{_reason(r)} (HTTP {r.status_code})", 1)
    c.done(f"connection {connection_id} closed", "closed", connection=connection_id)


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
@pass_client
def user_add(c: Client, name: str, new_password: str, tags: str) -> None:
    c.call("PUT", f"/api/users/{quote(name, safe='')}", {"password": new_password, "tags": tags})
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
    c.show(c.call("GET", "/api/vhosts"), ["name", "messages"])


@vhost.command("add")
@click.argument("name")
@pass_client
def vhost_add(c: Client, name: str) -> None:
    c.call("PUT", f"/api/vhosts/{quote(name, safe='')}")
    c.done(f"vhost {name} added", "added", name=name)


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
@click.option("--configure", default=".*", show_default=True)
@click.option("--write", default=".*", show_default=True)
@click.option("--read", default=".*", show_default=True)
@pass_client
def permissions_set(c: Client, user_name: str, configure: str, write: str, read: str) -> None:
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
