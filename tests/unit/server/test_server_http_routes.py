"""The HTTP route table: a resource module registered with a Router gets the preamble its routes
declare (user, vhost, reader, permissions), applied in order before the handler, on a real Broker."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from headrace.server.auth import Permission
from headrace.server.broker import Broker, VHost
from headrace.server.http.api import RESOURCES, router
from headrace.server.http.routes import Request, Response, Router, Routes, json_response
from shell_ports import shell_ports


def make_ctx() -> SimpleNamespace:
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    broker.add_vhost("other")
    users = broker.users
    users.add_user("plain", "pw", [])
    users.add_user("mgmt", "pw", ["management"])
    users.add_user("mon", "pw", ["monitoring"])
    for name in ("plain", "mgmt", "mon"):
        users.set_permission(name, "/", Permission("^own-", "^own-", "^own-"))
    return SimpleNamespace(broker=broker, now=1000.0)


calls: list[dict[str, Any]] = []
widgets = Routes()  # a new resource module, as another one would declare it


@widgets.get("/api/widgets/{vhost}/{name}", reader=True, perms=[("configure", "name"), ("read", "name")])
def get_widget(ctx: Any, req: Request, vhost: VHost, name: str) -> Response:
    calls.append({"vhost": vhost, "name": name})
    return json_response(200, {"vhost": vhost.name, "name": name})


@widgets.put("/api/widgets/{vhost}/{name}", admin=True, vhost=None, params={"colour": "red"})
def put_widget(ctx: Any, req: Request, vhost: str, name: str, colour: str) -> Response:
    calls.append({"vhost": vhost, "name": name, "colour": colour})
    return Response(204)


def call(ctx: SimpleNamespace, method: str, path: str, user: str) -> tuple[int, Any]:
    request = Request(method, path, {}, {}, b"", user=ctx.broker.users.users[user])
    response = Router([widgets]).dispatch(ctx, request)
    return response.status, json.loads(response.body) if response.body else None


def test_the_preamble_runs_in_order_before_the_handler():
    ctx = make_ctx()
    calls.clear()
    # 1. the management tag comes first, whatever else is wrong
    assert call(ctx, "GET", "/api/widgets/nowhere/x", "plain") == (
        401, {"error": "not_authorised", "reason": "Not management user"})
    assert call(ctx, "PUT", "/api/widgets/%2F/x", "mgmt") == (
        401, {"error": "not_authorised", "reason": "Not administrator user"})
    # 2. the vhost: unknown, then one the user has no permissions in
    assert call(ctx, "GET", "/api/widgets/nowhere/own-x", "mgmt")[0] == 404
    assert call(ctx, "GET", "/api/widgets/other/own-x", "mgmt") == (
        401, {"error": "not_authorised", "reason": "access to vhost 'other' refused"})
    # 3. reading contents needs management (or administrator), not monitoring alone
    assert call(ctx, "GET", "/api/widgets/%2F/own-x", "mon")[1]["reason"].startswith("reading messages needs")
    # 4. permissions in the order declared: configure is named first
    assert call(ctx, "GET", "/api/widgets/%2F/theirs", "mgmt") == (
        401, {"error": "not_authorised", "reason": "configure access to 'theirs' in vhost '/' refused for user 'mgmt'"})
    assert calls == []  # no handler ran
    assert call(ctx, "GET", "/api/widgets/%2F/own-x", "mgmt") == (200, {"vhost": "/", "name": "own-x"})
    assert isinstance(calls[-1]["vhost"], VHost)  # the handler got the VHost, not its name


def test_vhost_none_keeps_the_name_and_params_are_passed():
    ctx = make_ctx()
    calls.clear()
    assert call(ctx, "PUT", "/api/widgets/no-such-vhost/w", "guest") == (204, None)
    assert calls == [{"vhost": "no-such-vhost", "name": "w", "colour": "red"}]
    assert call(ctx, "POST", "/api/widgets/%2F/w", "guest")[0] == 405


def test_the_api_router_holds_every_resource_module_and_no_path_twice():
    templates = router.templates()
    assert len(templates) == len(set(templates)) == sum(len(m.routes.routes) for m in RESOURCES)
    broker_routes = {pattern for _, pattern in templates}
    assert {"/api/overview", "/api/queues/{vhost}/{name}", "/api/bindings/{vhost}/e/{source}/q/{dest}/{props}",
            "/metrics"} <= broker_routes
    assert router.is_public("/metrics") and not router.is_public("/api/overview")  # the shell asks no login
