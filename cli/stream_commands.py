"""``headrace stream``: super streams (partitioned streams), through ``/api/super-streams``.

A thin client of the broker's HTTP API (``server/http/super_streams.py``), as the other command
groups are; the broker makes the exchange, the partition streams and their bindings.
"""

from __future__ import annotations

from urllib.parse import quote

import click

from .client import Client, kv_pairs, pass_client

__all__ = ["stream"]


@click.group()
def stream() -> None:
    """Super streams: a stream split into partitions (RabbitMQ's topology)."""


@stream.command("add-super")
@click.argument("name")
@click.option("--partitions", type=int, default=3, show_default=True,
              help="Partition streams NAME-0 .. NAME-(N-1).")
@click.option("--argument", "-a", multiple=True,
              help="x-argument of each partition stream as key=value (e.g. x-max-age=7D).")
@pass_client
def add_super(c: Client, name: str, partitions: int, argument: tuple[str, ...]) -> None:
    """Create super stream NAME: a direct exchange with x-super-stream, its partition streams and
    their bindings ("0" .. "N-1", x-stream-partition-order)."""
    c.call("PUT", f"/api/super-streams/{c.v}/{quote(name, safe='')}",
           {"partitions": partitions, "arguments": kv_pairs(argument)})
    c.done(f"Super stream {name} has been created", "created", super_stream=name, partitions=partitions)


@stream.command("delete-super")
@click.argument("name")
@pass_client
def delete_super(c: Client, name: str) -> None:
    """Delete super stream NAME: its exchange and its partition streams."""
    c.call("DELETE", f"/api/super-streams/{c.v}/{quote(name, safe='')}")
    c.done(f"Super stream {name} has been deleted", "deleted", super_stream=name)


@stream.command("list-super")
@pass_client
def list_super(c: Client) -> None:
    """Super streams with their partitions, in partition order."""
    rows = c.call("GET", f"/api/super-streams/{c.v}")
    if not c.as_json:
        rows = [{**r, "partitions": " ".join(p["name"] for p in r["partitions"]),
                 "problems": "; ".join(r["problems"])} for r in rows]
    c.show(rows, ["name", "partition_count", "partitions", "consistent", "problems"])


@stream.command("groups")
@click.argument("name", required=False)
@pass_client
def groups(c: Client, name: str | None) -> None:
    """Consumer groups (of every stream and super stream, or of NAME's): one row per group and
    partition, with the active member, the group's committed offset and its lag."""
    path = f"/api/stream-groups/{c.v}" + (f"/{quote(name, safe='')}" if name else "")
    found = c.call("GET", path)
    if c.as_json:
        c.show(found, [])
        return
    rows = [{"group": g["name"], "stream": g["stream"], "partition": p["stream"],
             "active": (p["active_consumer"] or {}).get("consumer_tag", ""), "waiting": p["waiting"],
             "committed_offset": "" if p["committed_offset"] is None else p["committed_offset"], "lag": p["lag"]}
            for g in found for p in g["partitions"]]
    c.show(rows, ["group", "stream", "partition", "active", "waiting", "committed_offset", "lag"])
