"""``headrace policy set|clear|list``: policies and operator policies, as ``rabbitmqctl set_policy``
takes them (NAME PATTERN DEFINITION-as-JSON), through the broker's ``/api/(operator-)policies``."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import click

from .client import Client, pass_client

__all__ = ["policy"]

APPLY_TO = ["all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"]
_operator = click.option("--operator", is_flag=True, help="An operator policy (caps what users set).")


def _base(operator: bool) -> str:
    return "/api/operator-policies" if operator else "/api/policies"


@click.group()
def policy() -> None:
    """Set, clear and list policies (queue and exchange settings by name pattern)."""


@policy.command("list")
@_operator
@pass_client
def policy_list(c: Client, operator: bool) -> None:
    rows: list[dict[str, Any]] = c.call("GET", f"{_base(operator)}/{c.v}")
    for row in rows:
        row["definition"] = json.dumps(row["definition"], sort_keys=True) if not c.as_json else row["definition"]
    c.show(rows, ["vhost", "name", "pattern", "apply-to", "definition", "priority"])


@policy.command("set")
@click.argument("name")
@click.argument("pattern")
@click.argument("definition")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--apply-to", type=click.Choice(APPLY_TO), default="all", show_default=True)
@_operator
@pass_client
def policy_set(c: Client, name: str, pattern: str, definition: str, priority: int, apply_to: str,
               operator: bool) -> None:
    """DEFINITION is a JSON object, e.g. '{"max-length": 1000}'."""
    try:
        parsed = json.loads(definition)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="DEFINITION") from None
    body = {"pattern": pattern, "definition": parsed, "priority": priority, "apply-to": apply_to}
    c.call("PUT", f"{_base(operator)}/{c.v}/{quote(name, safe='')}", body)
    c.done(f"policy {name} set on {c.vhost}", "set", policy=name)


@policy.command("clear")
@click.argument("name")
@_operator
@pass_client
def policy_clear(c: Client, name: str, operator: bool) -> None:
    c.call("DELETE", f"{_base(operator)}/{c.v}/{quote(name, safe='')}")
    c.done(f"policy {name} cleared on {c.vhost}", "cleared", policy=name)
