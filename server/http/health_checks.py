"""RabbitMQ's ``/api/health/checks/*`` for Kubernetes probes and monitoring: 200 with
``{"status": "ok"}`` when the check passes, 503 with ``{"status": "failed", "reason": ...}`` when
it does not (``alarms`` is in ``health.py``)."""

from __future__ import annotations

from typing import Any

from .node_facts import NODE_NAME, PROTOCOLS
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()

SECONDS = {"days": 86_400, "weeks": 7 * 86_400, "months": 30 * 86_400, "years": 365 * 86_400}
# names a protocol-listener check accepts, as RabbitMQ's normalisation of them
PROTOCOL_ALIASES = {"amqp": "amqp", "amqp091": "amqp", "amqp0-9-1": "amqp", "amqps": "amqp/ssl",
                    "amqp/ssl": "amqp/ssl", "http": "http", "https": "https", "http/ssl": "https"}


def _ok(**extra: Any) -> Response:
    return json_response(200, {"status": "ok", **extra})


def _failed(reason: str, **extra: Any) -> Response:
    return json_response(503, {"status": "failed", "reason": reason, **extra})


@routes.get("/api/health/checks/local-alarms")
def local_alarms(ctx: Context, req: Request) -> Response:
    alarms = sorted(ctx.broker.alarms)
    if alarms:
        return _failed("There are alarms in effect on the node",
                       alarms=[{"node": NODE_NAME, "resource": a} for a in alarms])
    return _ok()


@routes.get("/api/health/checks/certificate-expiration/{within}/{unit}")
def certificate_expiration(ctx: Context, req: Request, within: str, unit: str) -> Response:
    if unit not in SECONDS:
        raise HTTPError(400, "bad_request", f"unit must be one of {', '.join(SECONDS)}, got '{unit}'")
    if not within.isdigit():
        raise HTTPError(400, "bad_request", f"within must be a whole number, got '{within}'")
    not_after = ctx.node_facts().cert_not_after
    if not_after is not None and not_after <= ctx.now + int(within) * SECONDS[unit]:
        listeners = [lst for lst in ctx.node_facts().listeners if lst.name in ("amqps", "https")]
        return _failed("Certificates expiring", expired=[
            {"node": NODE_NAME, "protocol": PROTOCOLS[lst.name], "interface": lst.host, "port": lst.port,
             "expires_in_seconds": int(not_after - ctx.now)} for lst in listeners])
    return _ok()


@routes.get("/api/health/checks/port-listener/{port}")
def port_listener(ctx: Context, req: Request, port: str) -> Response:
    if not port.isdigit():
        raise HTTPError(400, "bad_request", f"port must be a number, got '{port}'")
    ports = sorted({lst.port for lst in ctx.node_facts().listeners})
    if int(port) not in ports:
        return _failed(f"No active listener on port {port}", missing=int(port), ports=ports)
    return _ok(port=int(port))


@routes.get("/api/health/checks/protocol-listener/{protocol}")
def protocol_listener(ctx: Context, req: Request, protocol: str) -> Response:
    wanted = PROTOCOL_ALIASES.get(protocol.lower())
    protocols = sorted({PROTOCOLS[lst.name] for lst in ctx.node_facts().listeners})
    if wanted is None or wanted not in protocols:
        return _failed(f"No active listener for protocol {protocol}", missing=protocol, protocols=protocols)
    return _ok(protocol=protocol)


@routes.get("/api/health/checks/virtual-hosts")
def virtual_hosts(ctx: Context, req: Request) -> Response:
    return _ok()  # every vhost of a running headrace is running (none is stopped on its own)


@routes.get("/api/health/checks/node-is-quorum-critical")
def quorum_critical(ctx: Context, req: Request) -> Response:
    return _ok(reason="single node cluster")  # no other member depends on this one


@routes.get("/api/health/checks/node-is-mirror-sync-critical")
def mirror_sync_critical(ctx: Context, req: Request) -> Response:
    return _ok(reason="single node cluster")
