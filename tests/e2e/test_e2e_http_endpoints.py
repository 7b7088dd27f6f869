"""Every GET endpoint of RabbitMQ 3.10's management API reference, walked against a real broker with
the same objects declared as one would on RabbitMQ: each answers with RabbitMQ's status and with at
least the fields RabbitMQ's answer has (shapes recorded from RabbitMQ 3.10 responses, since no
RabbitMQ runs in these tests). Plus the list query parameters, limits and topic permissions as
clients see them over AMQP.
"""

from __future__ import annotations

from typing import Any

import httpx
import pika
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(90)

NODE = "headrace@localhost"
BINDING = {"source", "vhost", "destination", "destination_type", "routing_key", "arguments", "properties_key"}
PERMISSION = {"user", "vhost", "configure", "write", "read"}
TOPIC_PERMISSION = {"user", "vhost", "exchange", "write", "read"}
USER = {"name", "tags", "hashing_algorithm", "limits"}
RATE = {"rate"}
QUEUE = {"name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type", "state", "node", "policy",
         "operator_policy", "effective_policy_definition", "consumers", "consumer_capacity",
         "consumer_utilisation", "exclusive_consumer_tag", "single_active_consumer_tag", "memory", "messages",
         "messages_details", "messages_ready", "messages_ready_details", "messages_unacknowledged",
         "messages_unacknowledged_details", "message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
         "message_bytes_persistent", "message_bytes_ram", "messages_persistent", "messages_ram",
         "messages_paged_out", "message_bytes_paged_out", "head_message_timestamp", "message_stats",
         "backing_queue_status", "recoverable_slaves", "reductions", "garbage_collection"}
QUEUE_ONE = QUEUE | {"consumer_details", "incoming", "deliveries"}
EXCHANGE = {"name", "vhost", "type", "durable", "auto_delete", "internal", "arguments", "user_who_performed_action"}
EXCHANGE_ONE = EXCHANGE | {"incoming", "outgoing"}
VHOST = {"name", "description", "tags", "tracing", "metadata", "cluster_state", "default_queue_type", "messages",
         "messages_details", "messages_ready", "messages_ready_details", "messages_unacknowledged",
         "messages_unacknowledged_details", "message_stats", "recv_oct", "send_oct"}
CONNECTION = {"name", "node", "type", "state", "protocol", "user", "vhost", "host", "port", "peer_host", "peer_port",
              "ssl", "auth_mechanism", "channels", "channel_max", "frame_max", "timeout", "client_properties",
              "connected_at", "recv_oct", "recv_oct_details", "send_oct", "send_oct_details", "recv_cnt", "send_cnt",
              "send_pend", "user_provided_name"}
CHANNEL = {"name", "node", "number", "user", "vhost", "connection_details", "state", "consumer_count", "confirm",
           "transactional", "prefetch_count", "global_prefetch_count", "messages_unacknowledged",
           "messages_unconfirmed", "messages_uncommitted", "acks_uncommitted", "message_stats", "idle_since"}
CHANNEL_ONE = CHANNEL | {"consumer_details", "deliveries", "publishes"}
CONSUMER = {"consumer_tag", "queue", "channel_details", "ack_required", "exclusive", "prefetch_count", "arguments",
            "active", "activity_status"}
NODE_KEYS = {"name", "type", "running", "os_pid", "uptime", "fd_used", "fd_total", "sockets_used", "sockets_total",
             "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm", "proc_used",
             "proc_total", "processors", "run_queue", "partitions", "exchange_types", "auth_mechanisms",
             "applications", "contexts", "listeners", "rates_mode", "net_ticktime", "enabled_plugins"}
OVERVIEW = {"management_version", "rates_mode", "exchange_types", "product_version", "product_name",
            "rabbitmq_version", "cluster_name", "node", "listeners", "contexts", "churn_rates", "object_totals",
            "queue_totals", "message_stats", "statistics_db_event_queue", "sample_retention_policies"}
DEFINITIONS = {"rabbit_version", "rabbitmq_version", "product_name", "product_version", "users", "vhosts",
               "permissions", "topic_permissions", "parameters", "global_parameters", "policies", "queues",
               "exchanges", "bindings"}
VHOST_DEFINITIONS = {"rabbit_version", "rabbitmq_version", "product_name", "product_version", "parameters",
                     "policies", "queues", "exchanges", "bindings"}
OK = {"status"}


@pytest.fixture(scope="module")
def world(broker):
    """Objects as a RabbitMQ user would declare them, and an open AMQP connection with a consumer."""
    names = {"q": unique("wq"), "x": unique("wx"), "x2": unique("wx2"), "u": unique("wu"), "v": unique("wv")}
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put(f"/api/vhosts/{names['v']}").status_code == 201
        http.put(f"/api/queues/%2F/{names['q']}", json={"durable": True})
        http.put(f"/api/exchanges/%2F/{names['x']}", json={"type": "topic"})
        http.put(f"/api/exchanges/%2F/{names['x2']}", json={"type": "fanout"})
        http.post(f"/api/bindings/%2F/e/{names['x']}/q/{names['q']}", json={"routing_key": "a.#"})
        http.post(f"/api/bindings/%2F/e/{names['x']}/e/{names['x2']}", json={"routing_key": "b"})
        http.put(f"/api/users/{names['u']}", json={"password": "pw", "tags": "management"})
        http.put(f"/api/topic-permissions/%2F/guest", json={"exchange": names["x"], "write": ".*", "read": ".*"})
        http.put("/api/parameters/federation-upstream/%2F/up", json={"value": {"uri": "amqp://localhost"}})
        http.put("/api/global-parameters/walk", json={"value": {"a": 1}})
        http.put(f"/api/vhost-limits/{names['v']}/max-queues", json={"value": 100})
        http.put("/api/user-limits/guest/max-channels", json={"value": 1000})
        http.put("/api/policies/%2F/walk", json={"pattern": "^nothing$", "definition": {"max-length": 1}})
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": names["q"], "payload": "x"})
        keys = http.get(f"/api/bindings/%2F/e/{names['x']}/q/{names['q']}").json()
        names["props_q"] = keys[0]["properties_key"] if keys else "missing"
        keys = http.get(f"/api/bindings/%2F/e/{names['x']}/e/{names['x2']}").json()
        names["props_e"] = keys[0]["properties_key"] if keys else "missing"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?heartbeat=0"))
    channel = conn.channel()
    channel.basic_consume(names["q"], lambda *a: None, auto_ack=False)
    conn.process_data_events(time_limit=0.2)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        connections = http.get("/api/connections").json()
        names["conn"] = connections[0]["name"]
        names["chan"] = http.get("/api/channels").json()[0]["name"]
    yield names
    conn.close()


def endpoints(n: dict[str, str], port: int) -> list[tuple[str, int, set[str], str]]:
    """(path, status, required keys, "object" | "list" | "none"): RabbitMQ 3.10's documented GETs."""
    q, x, x2, u, v = n["q"], n["x"], n["x2"], n["u"], n["v"]
    return [
        ("/api/overview", 200, OVERVIEW, "object"),
        ("/api/cluster-name", 200, {"name"}, "object"),
        ("/api/nodes", 200, NODE_KEYS, "list"),
        (f"/api/nodes/{NODE}", 200, NODE_KEYS, "object"),
        ("/api/extensions", 200, set(), "list0"),
        ("/api/definitions", 200, DEFINITIONS, "object"),
        ("/api/definitions/%2F", 200, VHOST_DEFINITIONS, "object"),
        ("/api/connections", 200, CONNECTION, "list"),
        ("/api/vhosts/%2F/connections", 200, CONNECTION, "list"),
        (f"/api/connections/{n['conn']}", 200, CONNECTION, "object"),
        (f"/api/connections/{n['conn']}/channels", 200, CHANNEL, "list"),
        ("/api/channels", 200, CHANNEL, "list"),
        ("/api/vhosts/%2F/channels", 200, CHANNEL, "list"),
        (f"/api/channels/{n['chan']}", 200, CHANNEL_ONE, "object"),
        ("/api/consumers", 200, CONSUMER, "list"),
        ("/api/consumers/%2F", 200, CONSUMER, "list"),
        ("/api/exchanges", 200, EXCHANGE, "list"),
        ("/api/exchanges/%2F", 200, EXCHANGE, "list"),
        (f"/api/exchanges/%2F/{x}", 200, EXCHANGE_ONE, "object"),
        (f"/api/exchanges/%2F/{x}/bindings/source", 200, BINDING, "list"),
        (f"/api/exchanges/%2F/{x2}/bindings/destination", 200, BINDING, "list"),
        ("/api/queues", 200, QUEUE, "list"),
        ("/api/queues/%2F", 200, QUEUE, "list"),
        ("/api/queues/detailed", 200, QUEUE_ONE, "list"),
        (f"/api/queues/%2F/{q}", 200, QUEUE_ONE, "object"),
        (f"/api/queues/%2F/{q}/bindings", 200, BINDING, "list"),
        ("/api/bindings", 200, BINDING, "list"),
        ("/api/bindings/%2F", 200, BINDING, "list"),
        (f"/api/bindings/%2F/e/{x}/q/{q}", 200, BINDING, "list"),
        (f"/api/bindings/%2F/e/{x}/q/{q}/{n['props_q']}", 200, BINDING, "object"),
        (f"/api/bindings/%2F/e/{x}/e/{x2}", 200, BINDING, "list"),
        (f"/api/bindings/%2F/e/{x}/e/{x2}/{n['props_e']}", 200, BINDING, "object"),
        ("/api/vhosts", 200, VHOST, "list"),
        ("/api/vhosts/%2F", 200, VHOST, "object"),
        ("/api/vhosts/%2F/permissions", 200, PERMISSION, "list"),
        ("/api/vhosts/%2F/topic-permissions", 200, TOPIC_PERMISSION, "list"),
        ("/api/users", 200, USER, "list"),
        ("/api/users/without-permissions", 200, USER, "list"),
        ("/api/users/guest", 200, USER, "object"),
        ("/api/users/guest/permissions", 200, PERMISSION, "list"),
        ("/api/users/guest/topic-permissions", 200, TOPIC_PERMISSION, "list"),
        ("/api/user-limits", 200, {"user", "value"}, "list"),
        ("/api/user-limits/guest", 200, {"user", "value"}, "list"),
        ("/api/whoami", 200, {"name", "tags"}, "object"),
        ("/api/permissions", 200, PERMISSION, "list"),
        ("/api/permissions/%2F/guest", 200, PERMISSION, "object"),
        ("/api/topic-permissions", 200, TOPIC_PERMISSION, "list"),
        ("/api/topic-permissions/%2F/guest", 200, TOPIC_PERMISSION, "list"),
        ("/api/parameters", 200, {"vhost", "component", "name", "value"}, "list"),
        ("/api/parameters/federation-upstream", 200, {"vhost", "component", "name", "value"}, "list"),
        ("/api/parameters/federation-upstream/%2F", 200, {"vhost", "component", "name", "value"}, "list"),
        ("/api/parameters/federation-upstream/%2F/up", 200, {"vhost", "component", "name", "value"}, "object"),
        ("/api/global-parameters", 200, {"name", "value"}, "list"),
        ("/api/global-parameters/walk", 200, {"name", "value"}, "object"),
        ("/api/policies", 200, {"vhost", "name", "pattern", "apply-to", "definition", "priority"}, "list"),
        ("/api/policies/%2F", 200, {"vhost", "name", "pattern", "apply-to", "definition", "priority"}, "list"),
        ("/api/policies/%2F/walk", 200, {"vhost", "name", "pattern", "apply-to", "definition", "priority"},
         "object"),
        ("/api/aliveness-test/%2F", 200, OK, "object"),
        ("/api/health/checks/alarms", 200, OK, "object"),
        ("/api/health/checks/local-alarms", 200, OK, "object"),
        ("/api/health/checks/certificate-expiration/1/months", 200, OK, "object"),
        (f"/api/health/checks/port-listener/{port}", 200, OK, "object"),
        ("/api/health/checks/protocol-listener/amqp", 200, OK, "object"),
        ("/api/health/checks/virtual-hosts", 200, OK, "object"),
        ("/api/health/checks/node-is-mirror-sync-critical", 200, OK, "object"),
        ("/api/health/checks/node-is-quorum-critical", 200, OK, "object"),
        ("/api/vhost-limits", 200, {"vhost", "value"}, "list"),
        (f"/api/vhost-limits/{v}", 200, {"vhost", "value"}, "list"),
        ("/api/auth", 200, {"oauth_enabled"}, "object"),
        ("/api/feature-flags", 200, {"name", "state", "stability", "desc", "provided_by"}, "list"),
    ]


def test_every_documented_get_endpoint_answers_with_rabbitmqs_shape(broker, world):
    wrong: list[str] = []
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        table = endpoints(world, broker.http_port)
        for path, status, keys, kind in table:
            r = http.get(path)
            if r.status_code != status:
                wrong.append(f"{path}: {r.status_code} {r.text[:120]}")
                continue
            body: Any = r.json()
            if kind in ("list", "list0"):
                if not isinstance(body, list) or (kind == "list" and not body):
                    wrong.append(f"{path}: expected a non-empty list, got {str(body)[:120]}")
                    continue
                body = body[0] if body else {}
            missing = keys - set(body)
            if missing:
                wrong.append(f"{path}: missing {sorted(missing)}")
    assert not wrong, f"{len(wrong)} of {len(table)} endpoints differ:\n" + "\n".join(wrong)


def test_lists_take_rabbitmqs_query_parameters(broker, http):
    prefix = unique("lq")
    for i in range(5):
        http.put(f"/api/queues/%2F/{prefix}-{i}", json={"durable": False})
    page = http.get("/api/queues/%2F", params={"page": 1, "page_size": 2, "name": prefix, "sort": "name",
                                               "sort_reverse": "true", "columns": "name,messages"}).json()
    assert page["filtered_count"] == 5 and page["page_count"] == 3 and page["item_count"] == 2
    assert page["items"] == [{"name": f"{prefix}-4", "messages": 0}, {"name": f"{prefix}-3", "messages": 0}]
    regex = http.get("/api/queues", params={"name": f"^{prefix}-[13]$", "use_regex": "true", "columns": "name"})
    assert sorted(q["name"] for q in regex.json()) == [f"{prefix}-1", f"{prefix}-3"]
    assert http.get("/api/queues", params={"page": 99, "name": prefix}).status_code == 400
    bare = http.get("/api/queues/%2F", params={"disable_stats": "true", "name": prefix}).json()
    assert bare and all("message_stats" not in q and "messages" not in q for q in bare)
    totals = http.get("/api/queues/%2F", params={"disable_stats": "true", "enable_queue_totals": "true",
                                                 "name": prefix}).json()
    assert all(q["messages"] == 0 and "message_stats" not in q for q in totals)


def test_vhost_limits_refuse_connections_and_queues(broker, http):
    vhost = unique("lim")
    http.put(f"/api/vhosts/{vhost}")
    assert http.put(f"/api/vhost-limits/{vhost}/max-connections", json={"value": 1}).status_code == 204
    assert http.put(f"/api/vhost-limits/{vhost}/max-queues", json={"value": 1}).status_code == 204
    assert http.put(f"/api/vhost-limits/{vhost}/max-things", json={"value": 1}).status_code == 400
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/{vhost}?heartbeat=0")
    first = pika.BlockingConnection(params)
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:  # pika: ProbableAccessDenied
            pika.BlockingConnection(params)
        assert "(530)" in str(refused.value) and "connection limit (1) is reached" in str(refused.value)
        assert http.put(f"/api/queues/{vhost}/a", json={"durable": False}).status_code == 201
        r = http.put(f"/api/queues/{vhost}/b", json={"durable": False})
        assert r.status_code == 400 and "queue limit" in r.json()["reason"]
        ch = first.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch.queue_declare("c")
        assert closed.value.reply_code == 406
    finally:
        first.close()
    assert http.delete(f"/api/vhost-limits/{vhost}/max-connections").status_code == 204
    pika.BlockingConnection(params).close()


def test_topic_permissions_restrict_publishing_by_routing_key(broker, http):
    user, exchange = unique("tp"), unique("tx")
    http.put(f"/api/users/{user}", json={"password": "pw", "tags": "management"})
    http.put(f"/api/permissions/%2F/{user}", json={"configure": ".*", "write": ".*", "read": ".*"})
    http.put(f"/api/exchanges/%2F/{exchange}", json={"type": "topic"})
    assert http.put(f"/api/topic-permissions/%2F/{user}",
                    json={"exchange": exchange, "write": "^{username}\\.", "read": ".*"}).status_code == 201
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://{user}:pw@127.0.0.1:{broker.amqp_port}/%2F"))
    try:
        ch = conn.channel()
        ch.confirm_delivery()  # each publish waits for its answer: the refusal comes with it
        ch.basic_publish(exchange, f"{user}.orders", b"mine")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch.basic_publish(exchange, "other.orders", b"theirs")
        assert closed.value.reply_code == 403 and "write access to topic 'other.orders'" in closed.value.reply_text
    finally:
        if conn.is_open:
            conn.close()
    with httpx.Client(base_url=broker.http_url, auth=(user, "pw"), timeout=10) as mine:
        r = mine.post(f"/api/exchanges/%2F/{exchange}/publish", json={"routing_key": "other.x", "payload": ""})
        assert r.status_code == 403
        r = mine.post(f"/api/exchanges/%2F/{exchange}/publish", json={"routing_key": f"{user}.x", "payload": ""})
        assert r.status_code == 200
    assert http.delete(f"/api/topic-permissions/%2F/{user}").status_code == 204
    assert http.get(f"/api/topic-permissions/%2F/{user}").status_code == 404


def test_users_without_permissions_and_bulk_delete(http):
    a, b = unique("bd"), unique("bd")
    for name in (a, b):
        http.put(f"/api/users/{name}", json={"password": "pw", "tags": ""})
    http.put(f"/api/permissions/%2F/{b}", json={"configure": "", "write": "", "read": ""})
    lonely = {u["name"] for u in http.get("/api/users/without-permissions").json()}
    assert a in lonely and b not in lonely
    assert http.post("/api/users/bulk-delete", json={"users": [a, b, unique("nobody")]}).status_code == 204
    assert http.get(f"/api/users/{a}").status_code == 404 and http.get(f"/api/users/{b}").status_code == 404


def test_cluster_name_and_health_checks(broker, http):
    assert http.put("/api/cluster-name", json={"name": "walk-cluster"}).status_code == 204
    assert http.get("/api/cluster-name").json() == {"name": "walk-cluster"}
    assert http.get("/api/overview").json()["cluster_name"] == "walk-cluster"
    assert http.get("/api/health/checks/port-listener/1").status_code == 503
    assert http.get("/api/health/checks/protocol-listener/stomp").status_code == 503
    assert http.get("/api/health/checks/certificate-expiration/1/fortnights").status_code == 400
    assert http.get(f"/api/nodes/{NODE}x").status_code == 404
    listeners = {(lst["protocol"], lst["port"]) for lst in http.get("/api/overview").json()["listeners"]}
    assert ("amqp", broker.amqp_port) in listeners and ("http", broker.http_port) in listeners
