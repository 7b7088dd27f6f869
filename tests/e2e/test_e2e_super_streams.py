"""Super streams through pika, the HTTP API and the CLI: RabbitMQ's topology, per-key partitions
that agree with the stream clients' MurmurHash3 rule, listing, errors, restart."""

from __future__ import annotations

import json

import httpx
import pika
import pika.exceptions
import pytest
from click.testing import CliRunner
from e2e_support import unique, wait_until
from headrace.cli.main import cli
from headrace.exchanges import STREAM_SEED, murmur3_32

pytestmark = pytest.mark.timeout(120)

# rabbitmq-stream-java-client's HashRoutingStrategyTest: keys over partitions invoices-01..03
JAVA_CLIENT_ROUTES = {"hello1": 1, "hello2": 0, "hello3": 1, "hello4": 2, "hello5": 0, "hello6": 2, "hello7": 0,
                      "hello8": 1, "hello9": 0, "hello10": 2}


def open_channel(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def read_stream(conn, name: str, count: int) -> list[tuple[str, bytes]]:
    """``count`` messages of stream ``name`` from its first offset: (routing key, body)."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[tuple[str, bytes]] = []

    def on_message(chan, method, props, body):
        got.append((method.routing_key, body))
        chan.basic_ack(method.delivery_tag)

    tag = ch.basic_consume(name, on_message, arguments={"x-stream-offset": "first"})
    assert wait_until(lambda: len(got) >= count, conn, 10), (name, len(got), count)
    ch.basic_cancel(tag)
    ch.close()
    return got


def partition_counts(http: httpx.Client, name: str) -> list[int]:
    return [p["messages"] for p in http.get(f"/api/super-streams/%2F/{name}").json()["partitions"]]


def publish_keys(ch, exchange: str, keys: list[str]) -> None:
    for round_ in range(2):
        for key in keys:
            ch.basic_publish(exchange, key, f"{key}/{round_}".encode())


def check_placement(conn, name: str, partitions: int, keys: list[str]) -> dict[str, int]:
    """Read every partition; each key is in exactly one, the MurmurHash3 rule's (a key equal to a
    binding key: that binding's partition). Returns {key: partition index}."""
    where: dict[str, set[int]] = {}
    total = 0
    for i in range(partitions):
        expected = sum(1 for k in keys if _partition(k, partitions) == i) * 2
        got = read_stream(conn, f"{name}-{i}", expected) if expected else []
        assert len(got) == expected, (i, len(got), expected)
        total += len(got)
        for key, _ in got:
            where.setdefault(key, set()).add(i)
    assert total == 2 * len(keys)
    assert all(len(places) == 1 for places in where.values())
    return {key: next(iter(places)) for key, places in where.items()}


def _partition(key: str, partitions: int) -> int:
    if key.isdigit() and int(key) < partitions and str(int(key)) == key:
        return int(key)  # the binding key of a partition: routed as a direct exchange routes
    return murmur3_32(key.encode(), STREAM_SEED) % partitions


def test_http_super_stream_routes_like_the_stream_clients(broker_factory):
    proc = broker_factory()
    http = httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10)
    name = unique("inv")
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 3}).status_code == 201
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 3}).status_code == 204  # the same: no-op
    listed = http.get("/api/super-streams").json()
    mine = next(s for s in listed if s["name"] == name)
    assert [p["name"] for p in mine["partitions"]] == [f"{name}-0", f"{name}-1", f"{name}-2"]
    assert mine["consistent"] and mine["partition_count"] == 3
    exchange = http.get(f"/api/exchanges/%2F/{name}").json()
    assert exchange["type"] == "direct" and exchange["arguments"] == {"x-super-stream": True}
    queue = http.get(f"/api/queues/%2F/{name}-1").json()
    assert queue["type"] == "stream" and queue["durable"]
    bindings = http.get(f"/api/exchanges/%2F/{name}/bindings/source").json()
    assert sorted((b["destination"], b["routing_key"], b["arguments"]["x-stream-partition-order"]) for b in bindings) \
        == [(f"{name}-{i}", str(i), i) for i in range(3)]
    keys = list(JAVA_CLIENT_ROUTES) + ["0", "1", "2"] + [f"customer-{i}" for i in range(60)]
    conn, ch = open_channel(proc)
    publish_keys(ch, name, keys)
    where = check_placement(conn, name, 3, keys)
    assert {k: where[k] for k in JAVA_CLIENT_ROUTES} == JAVA_CLIENT_ROUTES
    conn.close()
    http.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)  # restored from the definitions: same routes
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get(f"/api/super-streams/%2F/{name}").json()["consistent"]
        conn, ch = open_channel(proc)
        before = partition_counts(http, name)
        publish_keys(ch, name, list(JAVA_CLIENT_ROUTES))
        after_expected = list(before)
        for key in JAVA_CLIENT_ROUTES:
            after_expected[JAVA_CLIENT_ROUTES[key]] += 2
        assert wait_until(lambda: partition_counts(http, name) == after_expected), partition_counts(http, name)
        conn.close()
        assert http.delete(f"/api/super-streams/%2F/{name}").status_code == 204
        assert http.get(f"/api/exchanges/%2F/{name}").status_code == 404
        assert all(http.get(f"/api/queues/%2F/{name}-{i}").status_code == 404 for i in range(3))
        assert http.delete(f"/api/super-streams/%2F/{name}").status_code == 404


def test_declared_over_amqp_as_rabbitmq_tools_do(broker):
    conn, ch = open_channel(broker)
    name = unique("orders")
    ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    for i in range(4):
        ch.queue_declare(f"{name}-{i}", durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_bind(f"{name}-{i}", name, str(i), arguments={"x-stream-partition-order": i})
    keys = [f"order-{i}" for i in range(80)]
    publish_keys(ch, name, keys)
    check_placement(conn, name, 4, keys)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        described = http.get(f"/api/super-streams/%2F/{name}").json()
        assert [p["order"] for p in described["partitions"]] == [0, 1, 2, 3] and described["consistent"]
        ch.queue_delete(f"{name}-1")  # a partition gone: the super stream is inconsistent, and says so
        described = http.get(f"/api/super-streams/%2F/{name}").json()
        assert not described["consistent"] and described["problems"] == ["partition order 1 missing"]
        r = http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 4})
        assert r.status_code == 400
        assert r.json()["reason"] == (f"super stream '{name}' in vhost '/' already exists: partition order 1 missing")
    conn.close()


def test_bad_declarations_get_clear_errors(broker):
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        name = unique("bad")
        r = http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 0})
        assert (r.status_code, r.json()["reason"]) == (400, "The partition number must be greater than 0")
        assert http.get(f"/api/exchanges/%2F/{name}").status_code == 404  # nothing made
        assert http.put(f"/api/exchanges/%2F/{name}", json={"type": "direct"}).status_code == 201
        r = http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2})
        assert (r.status_code, r.json()["reason"]) == (400, f"there is already an exchange named {name}")
        other = unique("bad")
        assert http.put(f"/api/queues/%2F/{other}-1", json={"durable": True}).status_code == 201
        r = http.put(f"/api/super-streams/%2F/{other}", json={"partitions": 2})
        assert (r.status_code, r.json()["reason"]) == (400, f"there is already a queue named {other}-1")
        assert http.get(f"/api/exchanges/%2F/{other}").status_code == 404 and \
            http.get(f"/api/queues/%2F/{other}-0").status_code == 404
        assert http.get(f"/api/super-streams/%2F/{name}").status_code == 404  # a plain exchange is none
    conn, ch = open_channel(broker)
    name = unique("ss")
    ch.exchange_declare(name, "direct", arguments={"x-super-stream": True})
    ch.queue_declare(f"{name}-0", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare(f"{name}-1", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind(f"{name}-0", name, "0", arguments={"x-stream-partition-order": 0})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(f"{name}-1", name, "1", arguments={"x-stream-partition-order": 0})
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - Invalid argument, 'x-stream-partition-order' 0 is already that of "
             f"partition '{name}-0'")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(unique("t"), "topic", arguments={"x-super-stream": True})
    assert info.value.reply_text == \
        "PRECONDITION_FAILED - Invalid argument, 'x-super-stream' is only valid on a direct exchange"
    assert conn.is_open
    conn.close()


def run(broker, *args):
    return CliRunner().invoke(cli, [*args, "--url", broker.http_url], catch_exceptions=False)


def test_cli_add_list_delete(broker):
    name = unique("cli-ss")
    r = run(broker, "stream", "add-super", name, "--partitions", "4")
    assert (r.exit_code, r.output.strip()) == (0, f"Super stream {name} has been created")
    r = run(broker, "stream", "list-super", "--json")
    mine = next(s for s in json.loads(r.output) if s["name"] == name)
    assert [p["name"] for p in mine["partitions"]] == [f"{name}-{i}" for i in range(4)]
    conn, ch = open_channel(broker)
    keys = [f"k{i}" for i in range(40)]
    publish_keys(ch, name, keys)
    check_placement(conn, name, 4, keys)
    conn.close()
    r = run(broker, "stream", "add-super", unique("cli-ss"), "--partitions", "0")
    assert r.exit_code == 1 and "The partition number must be greater than 0" in r.output
    r = run(broker, "stream", "delete-super", name)
    assert (r.exit_code, r.output.strip()) == (0, f"Super stream {name} has been deleted")
    r = run(broker, "queue", "list", "--json")
    assert not [q for q in json.loads(r.output) if q["name"].startswith(name)]
    r = run(broker, "stream", "delete-super", name)
    assert r.exit_code == 1 and f"no super stream '{name}' in vhost '/'" in r.output


def test_a_partition_must_be_a_stream(broker):
    conn, ch = open_channel(broker)
    name = unique("mixed")
    ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    ch.queue_declare(f"{name}-0", durable=True)  # a classic queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(f"{name}-0", name, "0", arguments={"x-stream-partition-order": 0})
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - Invalid argument, 'x-stream-partition-order' on a binding to queue '{name}-0', "
             "which is not a stream: a super stream's partitions are streams")
    ch = conn.channel()
    ch.queue_bind(f"{name}-0", name, "0")  # a plain binding to it is an ordinary direct binding
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get(f"/api/super-streams/%2F/{name}").json()["problems"] == ["no partition is bound"]
    conn.close()


def test_cli_lists_a_groups_partitions(broker):
    name, group = unique("cli-grp"), unique("g")
    assert run(broker, "stream", "add-super", name, "--partitions", "2").exit_code == 0
    conn, ch = open_channel(broker)
    ch.confirm_delivery()
    for key in ("0", "0", "1"):
        ch.basic_publish(name, key, b"m")
    ch.basic_qos(prefetch_count=10)
    got: list[int] = []
    args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first",
            "x-super-stream": name}
    for i in range(2):
        ch.basic_consume(f"{name}-{i}", lambda c, m, p, b: (got.append(1), c.basic_ack(m.delivery_tag)),
                         arguments=args, consumer_tag=f"member-{i}")
    wait_until(lambda: len(got) == 3, conn)

    def listed() -> list[list[str]]:
        r = run(broker, "stream", "groups", name, "--format", "tsv")
        assert r.exit_code == 0, r.output
        return [line.split("\t") for line in r.output.splitlines()]

    assert wait_until(lambda: listed()[1:] == [[group, name, f"{name}-0", "member-0", "0", "1", "0"],
                                               [group, name, f"{name}-1", "member-1", "0", "0", "0"]]), listed()
    assert listed()[0] == ["group", "stream", "partition", "active", "waiting", "committed_offset", "lag"]
    r = run(broker, "stream", "groups", "--json")
    assert any(g["name"] == group and g["members"] == 1 for g in json.loads(r.output))
    r = run(broker, "stream", "groups", unique("none"))
    assert r.exit_code == 1 and "no stream" in r.output
    conn.close()
