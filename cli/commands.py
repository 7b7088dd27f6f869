"""Management commands: a thin client of the broker's HTTP API (RabbitMQ's paths), output via rich.

Owner of the command set ``register`` adds to the ``headrace`` group. The commands live by resource
group in ``topology_commands.py``, ``message_commands.py``, ``admin_commands.py``,
``policy_commands.py``, ``stream_commands.py`` and ``diagnostics_commands.py``; the HTTP client, options and error handling in
``client.py``.
Exit codes: 0 ok, 1 the broker refused (its ``reason`` is printed), 2 usage error (click),
3 broker unreachable.
"""

from __future__ import annotations

import click

from .admin_commands import connections, definitions, mirror, permissions, user, vhost
from .diagnostics_commands import diagnostics
from .client import Client, add_connection_options, fail, global_options, pass_client
from .cluster_commands import cluster, join
from .message_commands import consume, get, publish
from .policy_commands import policy
from .stream_commands import stream
from .topology_commands import bind, exchange, overview, queue, unbind

__all__ = ["Client", "fail", "pass_client", "register"]


def register(cli: click.Group) -> None:
    global_options(cli)
    for command in (overview, exchange, queue, bind, unbind, publish, get, consume, definitions, connections, user,
                    vhost, permissions, mirror, policy, stream, diagnostics, cluster):
        add_connection_options(command)
        cli.add_command(command)
    cluster.add_command(join)  # runs a node, as ``serve`` does: no connection options
