"""Management commands for messages: publish (single, stdin lines or NDJSON batches), get and consume.

Thin wrappers of the broker's HTTP API (RabbitMQ's paths) through ``client.Client``.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote

import click
import httpx
from rich.progress import Progress

from .client import BATCH, Client, console, err, fail, kv_pairs, pass_client, reason_of
__all__ = ["consume", "get", "publish"]


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
    properties = kv_pairs(props)
    if header:
        properties["headers"] = kv_pairs(header)
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
                fail(f"{reason_of(r)} (HTTP {r.status_code})", 1)
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
                fail(f"{reason_of(r)} (HTTP {r.status_code})", 1)
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
