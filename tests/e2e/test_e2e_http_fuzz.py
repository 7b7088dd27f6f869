"""Fuzzing the HTTP layer of a real broker: structured requests over every route and raw bytes.

Whatever arrives, the answer is a well-formed response below 500 — a JSON error body for every
4xx — or a closed connection, and afterwards the broker still serves HTTP and AMQP.
``HEADRACE_FUZZ_EXAMPLES`` sets the run size (``make fuzz`` runs a long one).
"""

from __future__ import annotations

import json
import os
import re
import socket
import string
from urllib.parse import quote

import httpx
import pika
import pytest
from headrace.server.http.api import router
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ_EXAMPLES = int(os.environ.get("HEADRACE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# the streaming consume endpoint answers with an endless body by design; it has its own tests
TEMPLATES = sorted({(method, template) for method, template in router.templates() if not template.endswith("/consume")})
METHODS = ["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"]
NAMES = st.one_of(
    st.sampled_from(["%2F", "fuzz", "amq.direct", "amq.default", "", "..", "a%2Fb", "%ZZ", "x" * 300]),
    st.text(alphabet=string.ascii_letters + string.digits + "-_.%~!*'()", max_size=20),
    st.text(max_size=8).map(lambda s: quote(s, safe="")),
)
# most requests should reach a handler, so parameters lean to things that exist
KNOWN = {"vhost": st.just("%2F"), "name": st.sampled_from(["fuzz", "amq.direct", "amq.topic", "fuzz-user"]),
         "source": st.sampled_from(["fuzz", "amq.direct"]), "dest": st.just("fuzz"), "user": st.just("guest"),
         "props": st.sampled_from(["~", "fuzz", "fuzz~abc"])}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
FIELDS = ["type", "durable", "auto_delete", "internal", "arguments", "routing_key", "payload", "payload_encoding",
          "properties", "count", "ackmode", "encoding", "truncate", "password", "password_hash", "tags",
          "configure", "write", "read", "destination", "destination_type", "source", "x-mirror", "delivery_tag",
          "action", "requeue", "queues", "exchanges", "bindings", "users", "vhosts", "permissions"]
BODIES = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=6).map(lambda d: json.dumps(d).encode()),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.lists(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4), max_size=4).map(
        lambda rows: b"\n".join(json.dumps(r).encode() for r in rows)),
)
QUERIES = st.dictionaries(st.sampled_from(["page", "page_size", "columns", "name", "use_regex", "prefetch", "x"]),
                          st.text(max_size=6), max_size=3)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes | None]:
    method, template = draw(st.sampled_from(TEMPLATES))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(METHODS))  # a method the route may not have: 405
    def param(match: re.Match[str]) -> str:
        known = KNOWN.get(match.group(1))
        if known is not None and draw(st.booleans()):
            return draw(known)
        return draw(NAMES)

    path = re.sub(r"\{(\w+)\}", param, template)
    return method, path, draw(QUERIES), draw(BODIES)


def assert_json_error(response: httpx.Response) -> None:
    if response.status_code == 503 and response.request.url.path.startswith("/api/health/checks/"):
        # a failed health check is 503 with RabbitMQ's {"status": "failed", "reason"} body by design
        assert response.request.method == "HEAD" or response.json()["status"] == "failed"
        return
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400 and response.request.method != "HEAD":
        body = response.json()
        assert isinstance(body, dict) and "error" in body and "reason" in body, body


def assert_alive(broker) -> None:
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/overview").status_code == 200
        assert http.put("/api/vhosts/after-fuzz").status_code in (201, 204)
        assert http.put("/api/permissions/after-fuzz/guest",
                        json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    conn = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/after-fuzz"))
    ch = conn.channel()
    ch.queue_declare("alive")
    ch.basic_publish("", "alive", b"still here")
    assert ch.basic_get("alive", auto_ack=True)[2] == b"still here"
    conn.close()


@pytest.fixture(scope="module")
def http(broker):
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as client:
        assert client.put("/api/queues/%2F/fuzz", json={}).status_code in (201, 204)
        assert client.put("/api/exchanges/%2F/fuzz", json={"type": "topic"}).status_code in (201, 204)
        assert client.post("/api/bindings/%2F/e/fuzz/q/fuzz", json={"routing_key": "#"}).status_code == 201
        yield client


def test_structured_requests_on_every_route_get_clean_answers(broker, http):
    @FUZZ
    @given(requests())
    def run(request: tuple[str, str, dict[str, str], bytes | None]) -> None:
        method, path, query, body = request
        headers = {"content-type": "application/json"} if body is not None else {}
        response = http.request(method, path, params=query, content=body, headers=headers)
        assert_json_error(response)

    run()
    assert_alive(broker)


def test_requests_without_or_with_wrong_credentials_get_401_or_429(broker):
    """Missing credentials are 401; wrong ones are 401 until the failed-login throttle answers 429.
    One client for every example: a request of its own builds a TLS context each time (loading the
    CA file), which took longer than the broker's answer and, on a busy machine, the test's timeout."""
    @FUZZ
    @given(st.sampled_from(TEMPLATES), st.one_of(st.none(), st.tuples(st.text(max_size=10), st.text(max_size=10))))
    def run(route: tuple[str, str], auth: tuple[str, str] | None) -> None:
        method, template = route
        path = re.sub(r"\{[^}]+\}", "fuzz", template)
        if router.is_public(path) or auth == ("guest", "guest"):
            return  # /metrics is open to scrapers, as RabbitMQ's Prometheus plugin is; the console's files too
        response = client.request(method, path, auth=auth)
        if response.status_code == 429 and auth is not None:
            assert int(response.headers["retry-after"]) >= 1
            assert method == "HEAD" or response.json()["error"] == "too_many_requests"
            return
        assert response.status_code == 401, (method, path, response.status_code)
        assert method == "HEAD" or response.json()["error"] == "not_authorised"

    with httpx.Client(base_url=broker.http_url, timeout=10) as client:
        run()


REQUEST_PREFIXES = [b"", b"GET /api/overview HTTP/1.1\r\n", b"POST /api/exchanges/%2F/amq.default/publish HTTP/1.1\r\n",
                    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: ", b"PUT /api/queues/%2F/q HTTP/1.1\r\nHost: x\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"]


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_raw_bytes_get_a_4xx_or_a_closed_connection(broker):
    @FUZZ
    @given(st.sampled_from(REQUEST_PREFIXES), st.binary(max_size=400))
    def run(prefix: bytes, noise: bytes) -> None:
        with socket.create_connection(("127.0.0.1", broker.http_port), timeout=5) as sock:
            sock.settimeout(0.5)
            try:
                sock.sendall(prefix + noise + b"\r\n\r\n")
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                return  # the broker already closed on us
            answer = read_answer(sock)
        if answer:
            status_line = answer.split(b"\r\n", 1)[0]
            assert re.fullmatch(rb"HTTP/1\.1 [1-4]\d\d .*", status_line), status_line

    run()
    assert_alive(broker)
