"""``headrace diagnostics``: RabbitMQ's ``rabbitmq-diagnostics`` health checks and deprecated
feature listings, through the broker's HTTP API (``/api/health/checks/...``,
``/api/deprecated-features``). A check that fails prints the broker's reason and exits 1, as
``rabbitmq-diagnostics`` does, so a probe can run it as it is.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import click

from .client import Client, console, pass_client

__all__ = ["diagnostics"]

# command -> the health check's path under /api/health/checks/ (RabbitMQ 4.x's names, dashed)
CHECKS = {
    "check-local-alarms": "local-alarms",
    "check-is-in-service": "is-in-service",
    "check-below-connection-limit": "below-node-connection-limit",
    "check-ready-to-serve-clients": "ready-to-serve-clients",
    "check-metadata-store-initialized": "metadata-store/initialized",
    "check-virtual-hosts": "virtual-hosts",
    "check-if-node-is-quorum-critical": "node-is-quorum-critical",
}


@click.group()
def diagnostics() -> None:
    """Health checks and deprecated features, as rabbitmq-diagnostics has them."""


def _check(c: Client, path: str, what: str) -> None:
    data = c.call("GET", f"/api/health/checks/{path}")  # a failed check (503) exits 1 with its reason
    if c.as_json:
        console.print_json(json.dumps(data))
    else:
        console.print(f"{what}: ok", markup=False, highlight=False)


def _add_check(name: str, path: str) -> None:
    @diagnostics.command(name, help=f"GET /api/health/checks/{path}: exit 0 when it passes, 1 when it fails.")
    @pass_client
    def run(c: Client) -> None:
        _check(c, path, name)


for _name, _path in CHECKS.items():
    _add_check(_name, _path)


@diagnostics.command("check-quorum-queues-without-leader")
@click.argument("pattern", default=".*")
@click.option("--across-all-vhosts", is_flag=True, help="Every vhost, not only --vhost's.")
@pass_client
def leaderless(c: Client, pattern: str, across_all_vhosts: bool) -> None:
    """Quorum queues matching PATTERN without an elected leader (exit 1 if any)."""
    where = "all-vhosts" if across_all_vhosts else f"vhost/{c.v}"
    _check(c, f"quorum-queues-without-elected-leaders/{where}/{quote(pattern, safe='')}",
           "check-quorum-queues-without-leader")


@diagnostics.command("list-deprecated-features")
@click.option("--used", is_flag=True, help="Only those clients use now.")
@pass_client
def deprecated(c: Client, used: bool) -> None:
    """RabbitMQ's deprecated features, or those in use (/api/deprecated-features[/used])."""
    rows = c.call("GET", "/api/deprecated-features/used" if used else "/api/deprecated-features")
    c.show(rows, ["name", "deprecation_phase", "desc"])
