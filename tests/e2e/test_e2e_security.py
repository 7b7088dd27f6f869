"""Security end to end against real brokers: permissions on every AMQP and HTTP operation, revocation
on open connections, the failed-login throttle, bounded transactions, limits, first-run admin,
durable users/vhosts/permissions, HTTPS client certificates and the user/vhost CLI."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import unique
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(90)


def amqp_url(port: int, user: str, password: str, vhost: str = "/") -> str:
    return f"amqp://{user}:{password}@127.0.0.1:{port}/{quote(vhost, safe='')}"


def admin(proc) -> httpx.Client:
    return httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10)


# ---------------------------------------------------------------------------- raw AMQP helpers
class Raw:
    """A hand-driven AMQP client reading whole frames, for limits pika would enforce itself."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[int, int, bytes] | None:
        """(type, channel, payload), or None once the server hung up."""
        while True:
            if len(self.buf) >= 7:
                ftype, channel, size = struct.unpack_from(">BHI", self.buf)
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7:7 + size]
                    self.buf = self.buf[8 + size:]
                    return ftype, channel, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def method(self) -> tuple[int, int, int, bytes]:
        """(channel, class, method, arguments) of the next method frame."""
        while True:
            frame = self.frame()
            assert frame is not None, "server hung up"
            ftype, channel, payload = frame
            if ftype == 1:
                cls, meth = struct.unpack_from(">HH", payload)
                return channel, cls, meth, payload[4:]

    def login(self, user: str, password: str, *, channel_max: int = 0, frame_max: int = 131072,
              vhost: str = "/") -> tuple[int, str] | None:
        """Handshake; None once open, else the (code, text) of the server's connection.close."""
        self.send(b"AMQP\x00\x00\x09\x01")
        assert self.method()[1:3] == (10, 10)  # start
        self.send(encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", f"\0{user}\0{password}".encode(),
                                                             "en_US")))
        _, cls, meth, args = self.method()
        if (cls, meth) == (10, 50):
            return self.close_reply(args)
        self.send(encode_method_frame(0, m.ConnectionTuneOk(channel_max, frame_max, 0)))
        self.send(encode_method_frame(0, m.ConnectionOpen(vhost)))
        _, cls, meth, args = self.method()
        return self.close_reply(args) if (cls, meth) == (10, 50) else None

    def close_reply(self, args: bytes) -> tuple[int, str]:
        code, length = struct.unpack_from(">HB", args)
        self.send(encode_method_frame(0, m.ConnectionCloseOk()))
        return code, args[3:3 + length].decode()

    def connection_close(self) -> tuple[int, str]:
        """Skip to the server's connection.close, answer it and wait for the hang-up."""
        while True:
            _, cls, meth, args = self.method()
            if (cls, meth) == (10, 50):
                reply = self.close_reply(args)
                while self.frame() is not None:
                    pass
                return reply

    def close(self) -> None:
        self.sock.close()


def still_serving(proc) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"alive")
    assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    conn.close()


def wait_closed_by_broker(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    """Pump pika's I/O until the broker's connection.close arrives (bounded)."""
    for _ in range(100):
        try:
            conn.process_data_events(time_limit=0.05)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return exc
    raise AssertionError("the broker did not close the connection")


# ---------------------------------------------------------------------------- permissions
@pytest.fixture(scope="module")
def limited(broker) -> Iterator[dict[str, str]]:
    """A management user allowed only on names starting "mine-", and resources it may not touch."""
    names = {"user": unique("lim"), "theirs_q": unique("theirs-q"), "theirs_x": unique("theirs-x"),
             "mine_q": unique("mine-q"), "mine_x": unique("mine-x")}
    with admin(broker) as http:
        assert http.put(f"/api/users/{names['user']}", json={"password": "pw", "tags": "management"}).status_code == 201
        assert http.put(f"/api/permissions/%2F/{names['user']}",
                        json={"configure": "^mine-", "write": "^mine-", "read": "^mine-"}).status_code == 201
        for q in (names["theirs_q"], names["mine_q"]):
            assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code in (201, 204)
        for x in (names["theirs_x"], names["mine_x"]):
            assert http.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout", "durable": False}).status_code in (201, 204)
        assert http.post(f"/api/bindings/%2F/e/{names['theirs_x']}/q/{names['theirs_q']}", json={}).status_code == 201
        yield names
        http.delete(f"/api/users/{names['user']}")
        for q in (names["theirs_q"], names["mine_q"]):
            http.delete(f"/api/queues/%2F/{q}")
        for x in (names["theirs_x"], names["mine_x"]):
            http.delete(f"/api/exchanges/%2F/{x}")


AMQP_DENIED: list[tuple[str, Callable[..., object], str]] = [
    ("queue.declare", lambda ch, n: ch.queue_declare(n["theirs_q"]), "configure access to queue '{theirs_q}'"),
    ("exchange.declare", lambda ch, n: ch.exchange_declare(n["theirs_x"], "fanout"),
     "configure access to exchange '{theirs_x}'"),
    ("queue.delete", lambda ch, n: ch.queue_delete(n["theirs_q"]), "configure access to queue '{theirs_q}'"),
    ("exchange.delete", lambda ch, n: ch.exchange_delete(n["theirs_x"]), "configure access to exchange '{theirs_x}'"),
    ("queue.bind", lambda ch, n: ch.queue_bind(n["mine_q"], n["theirs_x"]), "read access to exchange '{theirs_x}'"),
    ("queue.unbind", lambda ch, n: ch.queue_unbind(n["mine_q"], n["theirs_x"]),
     "read access to exchange '{theirs_x}'"),
    ("exchange.bind", lambda ch, n: ch.exchange_bind(n["mine_x"], n["theirs_x"]),
     "read access to exchange '{theirs_x}'"),
    ("exchange.unbind", lambda ch, n: ch.exchange_unbind(n["mine_x"], n["theirs_x"]),
     "read access to exchange '{theirs_x}'"),
    ("basic.publish", lambda ch, n: ch.basic_publish(n["theirs_x"], "", b"x"), "write access to exchange '{theirs_x}'"),
    ("basic.publish default exchange", lambda ch, n: ch.basic_publish("", n["theirs_q"], b"x"),
     "write access to exchange 'amq.default'"),
    ("basic.consume", lambda ch, n: ch.basic_consume(n["theirs_q"], lambda *a: None),
     "read access to queue '{theirs_q}'"),
    ("basic.get", lambda ch, n: ch.basic_get(n["theirs_q"]), "read access to queue '{theirs_q}'"),
    ("queue.purge", lambda ch, n: ch.queue_purge(n["theirs_q"]), "read access to queue '{theirs_q}'"),
]


@pytest.mark.parametrize(("op", "text"), [(op, text) for _, op, text in AMQP_DENIED],
                         ids=[name for name, _, _ in AMQP_DENIED])
def test_amqp_operation_without_permission_is_403(broker, limited, op, text):
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url(broker.amqp_port, limited["user"], "pw")))
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        op(ch, limited)
        ch.queue_declare(limited["mine_q"], passive=True)  # a round trip after an asynchronous publish
    assert info.value.reply_code == 403
    assert info.value.reply_text == (f"ACCESS_REFUSED - {text.format(**limited)} in vhost '/' refused for user "
                                     f"'{limited['user']}'")
    assert conn.channel().queue_declare(limited["mine_q"], passive=True)  # the connection lives on
    conn.close()


HTTP_DENIED: list[tuple[str, str, str, dict | None]] = [
    ("PUT queue", "PUT", "/api/queues/%2F/{theirs_q}", {"durable": False}),
    ("DELETE queue", "DELETE", "/api/queues/%2F/{theirs_q}", None),
    ("PUT exchange", "PUT", "/api/exchanges/%2F/{theirs_x}", {"type": "fanout", "durable": False}),
    ("DELETE exchange", "DELETE", "/api/exchanges/%2F/{theirs_x}", None),
    ("POST binding", "POST", "/api/bindings/%2F/e/{theirs_x}/q/{mine_q}", {}),
    ("DELETE binding", "DELETE", "/api/bindings/%2F/e/{theirs_x}/q/{theirs_q}/~", None),
    ("publish", "POST", "/api/exchanges/%2F/{theirs_x}/publish",
     {"routing_key": "", "payload": "x", "payload_encoding": "string", "properties": {}}),
    ("get", "POST", "/api/queues/%2F/{theirs_q}/get", {"count": 1, "ackmode": "ack_requeue_false",
                                                        "encoding": "auto"}),
    ("purge", "DELETE", "/api/queues/%2F/{theirs_q}/contents", None),
]


@pytest.mark.parametrize(("method", "path", "body"), [(m_, p, b) for _, m_, p, b in HTTP_DENIED],
                         ids=[name for name, _, _, _ in HTTP_DENIED])
def test_http_operation_without_permission_is_401_json(broker, limited, method, path, body):
    with httpx.Client(base_url=broker.http_url, auth=(limited["user"], "pw"), timeout=10) as http:
        r = http.request(method, path.format(**limited), json=body)
    assert r.status_code == 401, r.text
    doc = r.json()
    assert set(doc) >= {"error", "reason"} and "refused" in doc["reason"]
    with admin(broker) as http:  # nothing happened
        assert http.get(f"/api/queues/%2F/{limited['theirs_q']}").status_code == 200
        assert http.get(f"/api/exchanges/%2F/{limited['theirs_x']}").status_code == 200


# ---------------------------------------------------------------------------- revocation
def test_revocation_applies_to_open_connections_and_deleting_the_user_closes_them(broker):
    user = unique("alice")
    with admin(broker) as http:
        http.put(f"/api/users/{user}", json={"password": "pw", "tags": ""})
        http.put(f"/api/permissions/%2F/{user}", json={"configure": ".*", "write": ".*", "read": ".*"})
        conn = pika.BlockingConnection(pika.URLParameters(amqp_url(broker.amqp_port, user, "pw")))
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"before")
        assert ch.basic_get(q, auto_ack=True)[2] == b"before"  # the write decision is cached now
        assert http.put(f"/api/permissions/%2F/{user}",
                        json={"configure": ".*", "write": "^$", "read": ".*"}).status_code == 204  # updated
        ch.basic_publish("", q, b"after")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(q, passive=True)
        assert info.value.reply_code == 403 and "write access" in info.value.reply_text
        ch = conn.channel()
        assert ch.queue_declare(q, passive=True).method.message_count == 0  # "after" never arrived
        assert http.delete(f"/api/users/{user}").status_code == 204
        closed = wait_closed_by_broker(conn)
        assert closed.reply_code == 320 and closed.reply_text == f"CONNECTION_FORCED - user '{user}' is deleted"
        assert not [c for c in http.get("/api/connections").json() if c["user"] == user]
    still_serving(broker)


def test_deleting_a_vhost_closes_its_connections(broker):
    vhost = unique("vh")
    with admin(broker) as http:
        assert http.put(f"/api/vhosts/{vhost}").status_code == 201  # guest gets full permissions on it
        on_vhost = pika.BlockingConnection(pika.URLParameters(amqp_url(broker.amqp_port, "guest", "guest", vhost)))
        on_vhost.channel().queue_declare("held", exclusive=True)
        elsewhere = pika.BlockingConnection(pika.URLParameters(broker.url))
        assert http.delete(f"/api/vhosts/{vhost}").status_code == 204
        closed = wait_closed_by_broker(on_vhost)
        assert closed.reply_code == 320 and closed.reply_text == f"CONNECTION_FORCED - vhost '{vhost}' is deleted"
        assert elsewhere.channel().queue_declare("", exclusive=True)  # other vhosts unaffected
        elsewhere.close()


# ---------------------------------------------------------------------------- login throttle
# one refill a second: the burst of 20 runs out however slowly a loaded machine hashes
SLOW_REFILL = {"HEADRACE_FAILED_LOGINS_PER_SECOND": "1"}


def test_failed_logins_are_throttled_and_known_clients_still_get_in(broker_factory):
    proc = broker_factory(env=SLOW_REFILL)
    still_serving(proc)  # guest's login is now cached
    texts = []
    for _ in range(400):  # far more than the burst plus what refills meanwhile; ends at the first throttle
        raw = Raw(proc.amqp_port)
        reply = raw.login("guest", "wrong")
        raw.close()
        assert reply is not None and reply[0] == 403
        texts.append(reply[1])
        if "too many" in reply[1]:
            break
    assert texts[-1] == "ACCESS_REFUSED - too many failed logins, try later"
    assert len(texts) > 20 and all("Login was refused" in t for t in texts[:-1])
    started = time.monotonic()
    still_serving(proc)  # a cached login passes at once, throttled or not
    assert time.monotonic() - started < 5
    with admin(proc) as http:
        assert http.get("/api/overview").status_code == 200


# ---------------------------------------------------------------------------- transactions
def test_uncommitted_transaction_is_capped(broker_factory):
    proc = broker_factory(env={"HEADRACE_MAX_TX_BYTES": "100000"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.tx_select()
    for _ in range(4):
        ch.basic_publish("", q, b"a" * 20_000)
    ch.tx_commit()
    assert ch.queue_declare(q, passive=True).method.message_count == 4
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        for _ in range(6):  # 120 kB uncommitted
            ch.basic_publish("", q, b"b" * 20_000)
        ch.tx_commit()
    assert info.value.reply_code == 406
    assert info.value.reply_text == ("PRECONDITION_FAILED - transaction too large: uncommitted publishes exceed "
                                     "max_tx_bytes (100000)")
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 4
    conn.close()


# ---------------------------------------------------------------------------- limits
def test_channel_max_frame_max_and_per_user_connections(broker_factory):
    proc = broker_factory(env={"HEADRACE_CHANNEL_MAX": "2", "HEADRACE_FRAME_MAX": "4096",
                               "HEADRACE_MAX_CONNECTIONS_PER_USER": "3"})
    bystander = pika.BlockingConnection(pika.URLParameters(proc.url))
    # channel_max: a third channel open at once is 530 NOT_ALLOWED (RabbitMQ's text)
    raw = Raw(proc.amqp_port)
    assert raw.login("guest", "guest", channel_max=2, frame_max=4096) is None
    for channel in (1, 2):
        raw.send(encode_method_frame(channel, m.ChannelOpen()))
        assert raw.method()[:3] == (channel, 20, 11)
    raw.send(encode_method_frame(3, m.ChannelOpen()))
    assert raw.connection_close() == (
        530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")
    raw.close()
    # frame_max: a frame larger than negotiated is 501 FRAME_ERROR for that connection only
    raw = Raw(proc.amqp_port)
    assert raw.login("guest", "guest", channel_max=2, frame_max=4096) is None
    raw.send(encode_method_frame(1, m.ChannelOpen()))
    raw.method()
    raw.send(encode_method_frame(1, m.BasicPublish(exchange="", routing_key="nowhere"))
             + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 5000) + b"\x00\x00")
             + encode_frame(3, 1, b"z" * 5000))
    code, text = raw.connection_close()
    assert code == 501 and text.startswith("FRAME_ERROR - frame size")
    raw.close()
    ch = bystander.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"y" * 10_000)  # split into frames of the negotiated size: fine
    assert ch.basic_get(q, auto_ack=True)[2] == b"y" * 10_000
    # max_connections_per_user: bystander + 2 more, the fourth is 530
    more = [pika.BlockingConnection(pika.URLParameters(proc.url)) for _ in range(2)]
    raw = Raw(proc.amqp_port)
    assert raw.login("guest", "guest", frame_max=4096) == (530, "NOT_ALLOWED - connection limit (3) for user 'guest' is reached")
    raw.close()
    for c in [bystander, *more]:
        c.close()


def test_queue_and_exchange_limits_per_vhost(broker_factory):
    proc = broker_factory(env={"HEADRACE_MAX_QUEUES_PER_VHOST": "2", "HEADRACE_MAX_EXCHANGES_PER_VHOST": "10"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("q1")
    ch.queue_declare("q2")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("q3")
    assert (info.value.reply_code, info.value.reply_text) == (
        406, "PRECONDITION_FAILED - queue limit in vhost '/' (2) is reached")
    ch = conn.channel()
    with admin(proc) as http:
        existing = len(http.get("/api/exchanges/%2F").json())
        assert existing < 10
        for i in range(10 - existing):
            ch.exchange_declare(f"x{i}", "fanout")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare("one-too-many", "fanout")
        assert (info.value.reply_code, info.value.reply_text) == (
            406, "PRECONDITION_FAILED - exchange limit in vhost '/' (10) is reached")
        assert len(http.get("/api/exchanges/%2F").json()) == 10
        r = http.put("/api/queues/%2F/q3", json={"durable": False})
        assert r.status_code >= 400 and "queue limit" in r.json()["reason"]
    conn.close()


# ---------------------------------------------------------------------------- first run, restart
def test_first_run_admin_and_users_vhosts_permissions_survive_a_clean_restart(broker_factory):
    proc = broker_factory(env={"HEADRACE_ADMIN_USER": "root", "HEADRACE_ADMIN_PASS": "r00t-pw"})
    with httpx.Client(base_url=proc.http_url, auth=("root", "r00t-pw"), timeout=10) as http:
        assert http.get("/api/whoami").json() == {"name": "root", "tags": ["administrator"]}
        assert http.put("/api/vhosts/orders").status_code == 201
        assert http.put("/api/users/alice", json={"password": "a-pw", "tags": "management"}).status_code == 201
        assert http.put("/api/permissions/orders/alice",
                        json={"configure": "^alice-", "write": ".*", "read": "^alice-"}).status_code == 201
        before = (http.get("/api/users").json(), http.get("/api/vhosts").json(), http.get("/api/permissions").json())
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url(proc.amqp_port, "root", "r00t-pw")))
    conn.close()
    assert proc.stop() == 0
    proc.env = {}  # the admin variables only matter on the first start
    proc.start()
    with httpx.Client(base_url=proc.http_url, auth=("root", "r00t-pw"), timeout=10) as http:
        after = (http.get("/api/users").json(), http.get("/api/vhosts").json(), http.get("/api/permissions").json())
    key = lambda rows: sorted(json.dumps(r, sort_keys=True) for r in rows)  # noqa: E731
    assert key(after[0]) == key(before[0])
    assert {v["name"] for v in after[1]} == {v["name"] for v in before[1]} >= {"/", "orders"}
    assert key(after[2]) == key(before[2])
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url(proc.amqp_port, "alice", "a-pw", "orders")))
    ch = conn.channel()
    ch.queue_declare("alice-q", exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("bob-q")
    assert info.value.reply_code == 403
    conn.close()


# ---------------------------------------------------------------------------- CLI
def cli(proc, *args: str, json_out: bool = True) -> subprocess.CompletedProcess[str]:
    extra = ["--json"] if json_out else []
    return subprocess.run([sys.executable, "-m", "headrace", *args, "--url", proc.http_url, *extra],
                          capture_output=True, text=True, timeout=30)


def test_cli_user_passwd_list_and_vhost_add_delete_list(broker):
    user, vhost = unique("cliuser"), unique("clivh")
    assert cli(broker, "user", "add", user, "--new-password", "old", "--tags", "management").returncode == 0
    users = json.loads(cli(broker, "user", "list").stdout)
    assert {"name": user, "tags": ["management"]}.items() <= next(u for u in users if u["name"] == user).items()
    assert cli(broker, "user", "passwd", user, "--new-password", "new").returncode == 0
    assert httpx.get(broker.http_url + "/api/whoami", auth=(user, "old")).status_code == 401
    assert httpx.get(broker.http_url + "/api/whoami", auth=(user, "new")).status_code == 200
    assert cli(broker, "vhost", "add", vhost).returncode == 0
    assert vhost in {v["name"] for v in json.loads(cli(broker, "vhost", "list").stdout)}
    assert cli(broker, "vhost", "delete", vhost).returncode == 0
    assert vhost not in {v["name"] for v in json.loads(cli(broker, "vhost", "list").stdout)}
    missing = cli(broker, "vhost", "delete", vhost, json_out=False)
    assert missing.returncode == 1 and missing.stderr == f"Error: vhost '{vhost}' not found (HTTP 404)\n"
    denied = cli(broker, "user", "list", "--user", user, "--password", "new", json_out=False)
    assert denied.returncode == 1 and denied.stderr == "Error: Not administrator user (HTTP 401)\n"
    assert cli(broker, "user", "delete", user).returncode == 0


# ---------------------------------------------------------------------------- monitoring user
def test_monitoring_user_sees_stats_but_not_messages(broker, limited):
    user = unique("mon")
    with admin(broker) as http:
        assert http.put(f"/api/users/{user}", json={"password": "pw", "tags": "monitoring"}).status_code == 201
        assert http.put(f"/api/permissions/%2F/{user}",
                        json={"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    try:
        with httpx.Client(base_url=broker.http_url, auth=(user, "pw"), timeout=10) as mon:
            assert mon.get("/api/overview").status_code == 200
            queues = mon.get("/api/queues")
            assert queues.status_code == 200 and limited["theirs_q"] in {q["name"] for q in queues.json()}
            r = mon.post(f"/api/queues/%2F/{limited['theirs_q']}/get",
                         json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
            assert r.status_code == 401 and set(r.json()) >= {"error", "reason"}
    finally:
        with admin(broker) as http:
            http.delete(f"/api/users/{user}")


# ---------------------------------------------------------------------------- throttle and default exchange over HTTP
def test_throttled_http_login_is_429_with_retry_after(broker_factory):
    proc = broker_factory(env=SLOW_REFILL)
    with admin(proc) as http:
        assert http.get("/api/overview").status_code == 200  # guest's login is cached now
        with httpx.Client(base_url=proc.http_url, auth=("guest", "wrong"), timeout=10) as wrong:
            statuses = []
            for _ in range(400):  # far more than the burst plus what refills meanwhile; ends at the first throttle
                r = wrong.get("/api/overview")
                statuses.append(r.status_code)
                if r.status_code != 401:
                    break
        assert r.status_code == 429
        assert len(statuses) > 20 and set(statuses[:-1]) == {401}
        assert r.headers["retry-after"] == "1"  # whole seconds, rounded up
        assert r.json() == {"error": "too_many_requests",
                            "reason": "too many failed logins, try later; retry after 1 s"}
        assert http.get("/api/overview").status_code == 200  # a cached login still passes


def test_http_publish_to_the_default_exchange_checks_write_on_amq_default(broker):
    q = unique("dq")
    users = {"denied": unique("nowrite"), "allowed": unique("defonly")}
    with admin(broker) as http:
        assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
        for user, write in ((users["denied"], "^$"), (users["allowed"], r"^amq\.default$")):
            assert http.put(f"/api/users/{user}", json={"password": "pw", "tags": "management"}).status_code == 201
            assert http.put(f"/api/permissions/%2F/{user}",
                            json={"configure": "", "write": write, "read": ""}).status_code == 201
        try:
            message = {"routing_key": q, "payload": "x"}
            with httpx.Client(base_url=broker.http_url, auth=(users["denied"], "pw"), timeout=10) as denied:
                r = denied.post("/api/exchanges/%2F/amq.default/publish", json=message)
                assert r.status_code == 401
                assert r.json() == {"error": "not_authorised", "reason": "write access to 'amq.default' in vhost "
                                                                          f"'/' refused for user '{users['denied']}'"}
                r = denied.post("/api/exchanges/%2F/amq.default/publish-batch", content=json.dumps(message))
                assert r.status_code == 401 and r.json()["error"] == "not_authorised"
            with httpx.Client(base_url=broker.http_url, auth=(users["allowed"], "pw"), timeout=10) as allowed:
                assert allowed.post("/api/exchanges/%2F/amq.default/publish", json=message).json() == {"routed": True}
                r = allowed.post("/api/exchanges/%2F/amq.default/publish-batch", content=json.dumps(message))
                assert r.status_code == 200 and r.json()["published"] == 1
            assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 2  # only the allowed user's
        finally:
            for user in users.values():
                http.delete(f"/api/users/{user}")
            http.delete(f"/api/queues/%2F/{q}")


def test_server_named_queue_declare_checks_configure_on_the_generated_name(broker):
    user = unique("xonly")
    with admin(broker) as http:
        assert http.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).status_code == 201
        assert http.put(f"/api/permissions/%2F/{user}",
                        json={"configure": "^x-.*", "write": ".*", "read": ".*"}).status_code == 201
        try:
            conn = pika.BlockingConnection(pika.URLParameters(amqp_url(broker.amqp_port, user, "pw")))
            ch = conn.channel()
            named = unique("x-q")
            assert ch.queue_declare(named, exclusive=True).method.queue == named  # its own names pass
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                ch.queue_declare("", exclusive=True)
            assert info.value.reply_code == 403
            prefix = "ACCESS_REFUSED - configure access to queue 'amq.gen-"
            text = info.value.reply_text
            assert text.startswith(prefix) and text.endswith(f"' in vhost '/' refused for user '{user}'")
            generated = text[len("ACCESS_REFUSED - configure access to queue '"):].split("'")[0]
            assert http.get(f"/api/queues/%2F/{quote(generated, safe='')}").status_code == 404  # not created
            conn.close()
        finally:
            http.delete(f"/api/users/{user}")
