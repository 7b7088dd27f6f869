"""The management API side by side: headrace and a private RabbitMQ node (management plugin on),
the same objects declared on both, every documented GET endpoint walked on both, and the status
codes and JSON key sets compared field by field.

    .venv/bin/python benchmarks/api_compare.py [--record tests/e2e/rabbitmq_shapes.json] [--bodies DIR]

Needs ``rabbitmq-server`` on PATH (Debian's package); the node runs in a temporary directory with
its own ports and is stopped at the end (the system service is never touched). Prints one line per
endpoint that differs and a summary; ``--record`` writes RabbitMQ's answers (status, kind and the
key paths of the first object) for ``tests/e2e/test_e2e_http_endpoints.py``, which checks headrace
against them when no RabbitMQ runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "e2e"))
from api_shapes import ENDPOINTS, shape_of  # noqa: E402
from run import Headrace, RabbitMQ, free_port, wait_port  # noqa: E402


def shape(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"status": response.status_code, "kind": "text", "keys": []}
    return shape_of(response.status_code, body)


def declare(http: httpx.Client, amqp_port: int) -> tuple[dict[str, str], pika.BlockingConnection]:
    """The same objects and traffic on either broker: a vhost, a durable queue bound to a topic
    exchange, an exchange-to-exchange binding, a user, topic permissions, runtime and global
    parameters, limits, a policy; then an AMQP connection that publishes (one with a timestamp),
    gets and acks one message and leaves a consumer on the queue."""
    n = {"q": "cmp-q", "x": "cmp-x", "x2": "cmp-x2", "u": "cmp-u", "v": "cmp-v"}
    for method, path, body in [
        ("PUT", f"/api/vhosts/{n['v']}", None),
        ("PUT", f"/api/queues/%2F/{n['q']}", {"durable": True}),
        ("PUT", f"/api/exchanges/%2F/{n['x']}", {"type": "topic"}),
        ("PUT", f"/api/exchanges/%2F/{n['x2']}", {"type": "fanout"}),
        ("POST", f"/api/bindings/%2F/e/{n['x']}/q/{n['q']}", {"routing_key": "a.#"}),
        ("POST", f"/api/bindings/%2F/e/{n['x']}/e/{n['x2']}", {"routing_key": "b"}),
        ("PUT", f"/api/users/{n['u']}", {"password": "pw", "tags": "management"}),
        ("PUT", "/api/topic-permissions/%2F/guest", {"exchange": n["x"], "write": ".*", "read": ".*"}),
        ("PUT", "/api/parameters/federation-upstream/%2F/up",
         {"value": {"uri": "amqp://localhost"}, "vhost": "/", "component": "federation-upstream", "name": "up"}),
        ("PUT", "/api/global-parameters/walk", {"value": {"a": 1}, "name": "walk"}),
        ("PUT", f"/api/vhost-limits/{n['v']}/max-queues", {"value": 100}),
        ("PUT", "/api/user-limits/guest/max-channels", {"value": 1000}),
        ("PUT", "/api/policies/%2F/walk", {"pattern": "^nothing$", "definition": {"max-length": 1}}),
    ]:
        r = http.request(method, path, json=body)
        if r.status_code >= 300:
            print(f"# declare {method} {path}: {r.status_code} {r.text[:200]}", file=sys.stderr)
    for key, dest in (("props_q", f"q/{n['q']}"), ("props_e", f"e/{n['x2']}")):
        found = http.get(f"/api/bindings/%2F/e/{n['x']}/{dest}").json()
        n[key] = found[0]["properties_key"] if found else "missing"
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F?heartbeat=0"))
    ch = conn.channel()
    ch.basic_publish(n["x"], "a.b", b"one", pika.BasicProperties(timestamp=1_700_000_000))
    ch.basic_publish(n["x"], "a.c", b"two")
    ch.basic_publish(n["x"], "nowhere", b"lost")
    method, _, _ = ch.basic_get(n["q"])
    if method is not None:
        ch.basic_ack(method.delivery_tag)
    ch.basic_consume(n["q"], lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    conn.process_data_events(time_limit=0.5)
    end = time.time() + 30  # RabbitMQ's stats arrive on its collection interval (5 s)
    while time.time() < end:
        conns = http.get("/api/connections").json()
        queue = http.get(f"/api/queues/%2F/{n['q']}").json()
        if conns and "message_stats" in queue and "recv_oct" in conns[0]:
            break
        conn.process_data_events(time_limit=0.5)
    time.sleep(6)  # one more collection: every statistic present
    conn.process_data_events(time_limit=0.1)
    n["conn"] = http.get("/api/connections").json()[0]["name"]
    n["chan"] = http.get("/api/channels").json()[0]["name"]
    return n, conn


def walk(base: str, amqp_port: int, node: str, port: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each endpoint's shape, and its body as text."""
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        names, conn = declare(http, amqp_port)
        try:
            names.update(node=node, port=str(port))
            answers = {template: http.get(template.format(**names)) for template in ENDPOINTS}
            return {t: shape(r) for t, r in answers.items()}, {t: r.text for t, r in answers.items()}
        finally:
            conn.close()


def compare(rabbit: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]) -> tuple[int, list[str]]:
    same = 0
    lines = []
    for template in ENDPOINTS:
        r, h = rabbit[template], ours[template]
        problems = []
        if r["status"] != h["status"]:
            problems.append(f"status {h['status']} (RabbitMQ {r['status']})")
        if r["kind"] != h["kind"]:
            problems.append(f"kind {h['kind']} (RabbitMQ {r['kind']})")
        missing = sorted(set(r["keys"]) - set(h["keys"]))
        if missing:
            problems.append(f"missing {missing}")
        extra = sorted(set(h["keys"]) - set(r["keys"]))
        if problems:
            lines.append(f"{template}: " + "; ".join(problems))
        else:
            same += 1
        if extra:
            lines.append(f"{template}: (headrace only: {extra})")
    return same, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", type=Path, help="write RabbitMQ's shapes to this JSON file")
    ap.add_argument("--bodies", type=Path, help="write both answers of every endpoint into this directory")
    args = ap.parse_args()
    if shutil.which("rabbitmq-server") is None:
        sys.exit("rabbitmq-server is not installed: nothing to compare with (the endpoint-walk test checks "
                 "against tests/e2e/rabbitmq_shapes.json instead)")
    with tempfile.TemporaryDirectory(prefix="api-compare-") as tmpdir:
        tmp = Path(tmpdir)
        mgmt_port = free_port()
        rabbit = RabbitMQ(tmp, plugins="[rabbitmq_management,rabbitmq_federation].",
                          config=f"management.tcp.port = {mgmt_port}\nmanagement.tcp.ip = 127.0.0.1\n")
        headrace = Headrace(tmp)
        try:
            wait_port(mgmt_port, 120)
            wait_port(headrace.http_port, 30)
            node = httpx.get(f"http://127.0.0.1:{mgmt_port}/api/overview", auth=("guest", "guest")).json()["node"]
            theirs, their_bodies = walk(f"http://127.0.0.1:{mgmt_port}", rabbit.port, node, mgmt_port)
            ours, our_bodies = walk(f"http://127.0.0.1:{headrace.http_port}", headrace.port, "headrace@localhost",
                                    headrace.http_port)
        finally:
            headrace.stop()
            rabbit.stop()
    same, lines = compare(theirs, ours)
    for line in lines:
        print(line)
    print(f"{same} of {len(ENDPOINTS)} endpoints answer with RabbitMQ's status and every key path it has")
    if args.bodies:
        args.bodies.mkdir(parents=True, exist_ok=True)
        for i, template in enumerate(ENDPOINTS):
            (args.bodies / f"{i:02d}-rabbitmq.json").write_text(template + "\n" + their_bodies[template])
            (args.bodies / f"{i:02d}-headrace.json").write_text(template + "\n" + our_bodies[template])
    if args.record:
        args.record.write_text(json.dumps({"rabbitmq_version": "3.10.8", "endpoints": theirs}, indent=1,
                                          sort_keys=True) + "\n")
        print(f"recorded RabbitMQ's shapes in {args.record}")


if __name__ == "__main__":
    main()
