"""The management API's router: every resource module's routes in one table.

Each module below declares its handlers on its own ``routes`` (``routes.py`` describes the route
table and the preamble a route declares: user, vhost, permissions). To add a resource, write its
module and add it to ``RESOURCES``.
"""

from __future__ import annotations

from . import (
    bindings,
    connections,
    console,
    definitions,
    deprecated,
    exchanges,
    health,
    health_checks,
    logs,
    messages,
    mirrors,
    nodes,
    overview,
    parameters,
    permissions,
    policies,
    queues,
    relations,
    shovels,
    stream_groups,
    super_streams,
    users,
    vhosts,
)
from .routes import Router

__all__ = ["RESOURCES", "router"]

# relations first: its fixed paths (/api/users/without-permissions) precede users' /api/users/{name}
RESOURCES = (relations, overview, nodes, vhosts, users, permissions, parameters, connections, exchanges, queues,
             bindings, messages, definitions, health, health_checks, deprecated, mirrors, logs, policies,
             super_streams, stream_groups, shovels, console)

router = Router(module.routes for module in RESOURCES)
