"""RabbitMQ's own management CLI, ``rabbitmqadmin`` (3.10.8, taken out of Debian's rabbitmq-server
package by ``make test``), unmodified, against a real headrace process: what an operator switching
from RabbitMQ runs keeps working, errors included. The expectations were checked against RabbitMQ
3.10.8 with the same commands; where the two differ (message counts: RabbitMQ's lag a stats interval
behind) the test asserts headrace's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pika
import pytest

pytestmark = pytest.mark.timeout(120)

RABBITMQADMIN = Path(__file__).resolve().parents[2] / "build" / "rabbitmqadmin" / "rabbitmqadmin"


@pytest.fixture(scope="module")
def admin(broker):
    assert RABBITMQADMIN.exists(), "make test extracts rabbitmqadmin from Debian's rabbitmq-server package"
    port = broker.http_url.rsplit(":", 1)[1]

    def run(*args: str, ok: bool = True) -> str:
        result = subprocess.run([sys.executable, str(RABBITMQADMIN), "-H", "127.0.0.1", "-P", port, *args],
                                capture_output=True, text=True, timeout=30)
        assert (result.returncode == 0) is ok, (args, result.returncode, result.stdout, result.stderr)
        return result.stdout + result.stderr

    return run


def test_declare_publish_get_list_and_delete(admin):
    assert admin("declare", "vhost", "name=adm-v") == "vhost declared\n"
    assert admin("declare", "user", "name=adm-u", "password=pw", "tags=management") == "user declared\n"
    admin("declare", "permission", "vhost=adm-v", "user=adm-u", "configure=.*", "write=.*", "read=.*")
    v = ("-V", "adm-v")
    admin(*v, "declare", "exchange", "name=adm-x", "type=topic", "durable=true")
    admin(*v, "declare", "queue", "name=adm-q", "durable=true", 'arguments={"x-max-length": 100}')
    assert admin(*v, "declare", "binding", "source=adm-x", "destination=adm-q", "routing_key=a.*") == \
        "binding declared\n"
    props = '{"delivery_mode": 2, "headers": {"h": "v"}, "message_id": "m1"}'
    assert admin(*v, "publish", "exchange=adm-x", "routing_key=a.b", "payload=hello", f"properties={props}") == \
        "Message published\n"
    assert admin(*v, "publish", "exchange=adm-x", "routing_key=zzz", "payload=lost") == \
        "Message published but NOT routed\n"
    queues = json.loads(admin(*v, "-f", "raw_json", "list", "queues", "name", "messages", "durable", "arguments"))
    assert queues == [{"name": "adm-q", "messages": 1, "durable": True, "arguments": {"x-max-length": 100}}]
    first = json.loads(admin(*v, "-f", "raw_json", "get", "queue=adm-q", "ackmode=ack_requeue_true"))
    assert [(m["payload"], m["routing_key"], m["exchange"], m["redelivered"], m["properties"]["headers"],
             m["properties"]["message_id"]) for m in first] == [("hello", "a.b", "adm-x", False, {"h": "v"}, "m1")]
    again = json.loads(admin(*v, "-f", "raw_json", "get", "queue=adm-q", "ackmode=ack_requeue_false", "count=5"))
    assert [(m["payload"], m["redelivered"]) for m in again] == [("hello", True)]
    # the default exchange's implicit binding is listed first, as RabbitMQ lists it
    assert admin(*v, "-f", "tsv", "list", "bindings", "source", "destination", "routing_key") == \
        "source\tdestination\trouting_key\n\tadm-q\tadm-q\nadm-x\tadm-q\ta.*\n"
    assert admin("-u", "adm-u", "-p", "pw", *v, "-f", "tsv", "list", "queues", "name") == "name\nadm-q\n"
    admin(*v, "purge", "queue", "name=adm-q")
    assert admin(*v, "delete", "binding", "source=adm-x", "destination_type=queue", "destination=adm-q",
                 "properties_key=a.*") == "binding deleted\n"
    admin(*v, "delete", "queue", "name=adm-q")
    admin(*v, "delete", "exchange", "name=adm-x")
    admin("delete", "user", "name=adm-u")
    admin("delete", "vhost", "name=adm-v")
    assert "adm-v" not in admin("-f", "tsv", "list", "vhosts", "name")


def test_refusals_print_rabbitmqs_reasons_and_exit_1(admin):
    admin("declare", "queue", "name=adm-r", "durable=true")
    assert admin("declare", "queue", "name=adm-r", "durable=false", ok=False) == (
        "*** inequivalent arg 'durable' for queue 'adm-r' in vhost '/': received 'false' but current is "
        "'true'\n\n")
    assert admin("get", "queue=adm-nope", ok=False) == "*** Not found: /api/queues/%2F/adm-nope/get\n\n"
    assert admin("-V", "adm-nope", "list", "queues", ok=False) == \
        "*** Not found: /api/queues/adm-nope?columns=name,messages\n\n"
    assert admin("-p", "wrong", "list", "queues", ok=False) == \
        "*** Access refused: /api/queues?columns=name,messages\n\n"
    assert admin("delete", "exchange", "name=amq.direct", ok=False).startswith("*** Access refused")
    admin("delete", "queue", "name=adm-r")


def test_policies_definitions_and_closing_a_connection(admin, broker, tmp_path):
    admin("declare", "policy", "name=adm-cap", "pattern=^adm-", 'definition={"max-length": 10}', "apply-to=queues",
          "priority=1")
    assert json.loads(admin("-f", "raw_json", "list", "policies", "name", "pattern", "definition", "priority")) == \
        [{"name": "adm-cap", "pattern": "^adm-", "definition": {"max-length": 10}, "priority": 1}]
    admin("declare", "queue", "name=adm-kept", "durable=true")
    exported = tmp_path / "defs.json"
    assert admin("export", str(exported)).startswith("Exported definitions")
    defs = json.loads(exported.read_text())
    kept = next(q for q in defs["queues"] if q["name"] == "adm-kept")
    assert (kept["vhost"], kept["durable"]) == ("/", True)
    admin("delete", "queue", "name=adm-kept")
    admin("delete", "policy", "name=adm-cap")
    assert admin("import", str(exported)).startswith("Uploaded definitions")
    assert [q["name"] for q in json.loads(admin("-f", "raw_json", "list", "queues", "name")) if q["name"] == "adm-kept"] \
        == ["adm-kept"]
    assert [p["name"] for p in json.loads(admin("-f", "raw_json", "list", "policies", "name"))] == ["adm-cap"]
    admin("delete", "policy", "name=adm-cap")
    admin("delete", "queue", "name=adm-kept")

    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": "adm-client"}
    conn = pika.BlockingConnection(params)
    listed = json.loads(admin("-f", "raw_json", "list", "connections", "name", "user", "client_properties"))
    name = next(c["name"] for c in listed if c["client_properties"].get("connection_name") == "adm-client")
    assert admin("close", "connection", f"name={name}") == "connection closed\n"
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        while True:
            conn.process_data_events(time_limit=1)
    assert closed.value.reply_code == 320


def test_declare_vhost_with_tracing_switches_the_firehose(admin):
    """rabbitmqadmin's vhost ``tracing`` (sent as the string "true"), as an operator turns the
    firehose on and off without rabbitmqctl."""
    assert admin("declare", "vhost", "name=adm-traced", "tracing=true") == "vhost declared\n"
    rows = json.loads(admin("-f", "raw_json", "list", "vhosts"))
    assert next(row for row in rows if row["name"] == "adm-traced")["tracing"] is True
    admin("declare", "vhost", "name=adm-traced", "tracing=false")
    rows = json.loads(admin("-f", "raw_json", "list", "vhosts"))
    assert next(row for row in rows if row["name"] == "adm-traced")["tracing"] is False
    admin("delete", "vhost", "name=adm-traced")
