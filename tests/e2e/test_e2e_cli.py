"""The headrace CLI against a real broker's HTTP API."""

from __future__ import annotations

import json
import uuid

import pika
import pytest
from click.testing import CliRunner
from headrace.cli.main import cli

pytestmark = pytest.mark.timeout(60)


def run(broker, *args, input=None):
    result = CliRunner().invoke(cli, [*args, "--url", broker.http_url], input=input, catch_exceptions=False)
    return result


def test_queue_exchange_bind_publish_get_cycle(broker):
    q, x = f"cli-{uuid.uuid4().hex[:6]}", f"clix-{uuid.uuid4().hex[:6]}"
    assert run(broker, "queue", "declare", q, "--transient").exit_code == 0
    assert run(broker, "exchange", "declare", x, "--type", "topic", "--transient").exit_code == 0
    assert run(broker, "bind", x, q, "-k", "a.*").exit_code == 0
    r = run(broker, "publish", x, "hello", "-k", "a.b", "-H", "n=1")
    assert r.exit_code == 0 and "routed 1" in r.output
    r = run(broker, "queue", "list", "--json")
    row = next(item for item in json.loads(r.output) if item["name"] == q)
    assert row["messages_ready"] == 1
    r = run(broker, "get", q, "--ack", "--json")
    assert json.loads(r.output)[0]["payload"] == "hello"
    r = run(broker, "publish", x, "-k", "a.c", "--stdin-lines", input="one\ntwo\n")
    assert "published 2, routed 2" in r.output
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    assert conn.channel().basic_get(q, auto_ack=True)[2] == b"one"
    conn.close()
    assert run(broker, "unbind", x, q, "-k", "a.*").exit_code == 0
    assert run(broker, "queue", "purge", q).exit_code == 0
    assert run(broker, "queue", "delete", q).exit_code == 0
    assert run(broker, "exchange", "delete", x).exit_code == 0


def test_errors_and_exit_codes(broker):
    r = run(broker, "queue", "delete", "no-such-queue-here")
    assert r.exit_code == 1
    r = CliRunner().invoke(cli, ["overview", "--url", "http://127.0.0.1:1"])
    assert r.exit_code == 3
    r = CliRunner().invoke(cli, ["queue", "declare"])
    assert r.exit_code == 2


def test_users_permissions_definitions_and_mirror(broker, tmp_path):
    name = f"u{uuid.uuid4().hex[:6]}"
    assert run(broker, "user", "add", name, "--new-password", "pw", "--tags", "management").exit_code == 0
    assert run(broker, "permissions", "set", name, "--configure", "^x").exit_code == 0
    assert name in run(broker, "permissions", "list").output
    out = tmp_path / "defs.json"
    assert run(broker, "definitions", "export", str(out)).exit_code == 0
    assert any(u["name"] == name for u in json.loads(out.read_text())["users"])
    assert run(broker, "definitions", "import", str(out)).exit_code == 0
    assert run(broker, "permissions", "clear", name).exit_code == 0
    assert run(broker, "user", "delete", name).exit_code == 0
    x = f"mx-{uuid.uuid4().hex[:6]}"
    run(broker, "exchange", "declare", x, "--type", "fanout")
    assert run(broker, "mirror", "enable", x, "--max-age-ms", "60000").exit_code == 0
    assert x in run(broker, "mirror", "list").output
    assert run(broker, "mirror", "disable", x).exit_code == 0
    run(broker, "exchange", "delete", x)
    assert "headrace" in run(broker, "overview").output


def test_consume_count_and_ndjson_file_publish(broker, tmp_path):
    q = f"cons-{uuid.uuid4().hex[:6]}"
    run(broker, "queue", "declare", q, "--transient")
    ndjson = tmp_path / "msgs.ndjson"
    ndjson.write_text("\n".join(json.dumps({"routing_key": q, "payload": f"line-{i}"}) for i in range(250)))
    r = run(broker, "publish", "", "--file", str(ndjson))
    assert r.exit_code == 0 and "published 250, routed 250" in r.output
    r = run(broker, "consume", q, "--count", "3")
    assert r.exit_code == 0 and r.output.split() == ["line-0", "line-1", "line-2"]
    r = run(broker, "consume", q, "--count", "2", "--requeue")
    assert r.output.split() == ["line-3", "line-4"]
    rows = json.loads(run(broker, "queue", "list", "--json").output)
    assert next(x for x in rows if x["name"] == q)["messages_ready"] == 247
    run(broker, "queue", "delete", q)


def test_connections_list_and_close(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    rows = json.loads(run(broker, "connections", "list", "--json").output)
    newest = max(row["id"] for row in rows)
    assert run(broker, "connections", "close", str(newest)).exit_code == 0
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
        conn.process_data_events(time_limit=5)
        conn.channel()


def test_url_and_credentials_from_a_config_file(broker, tmp_path, monkeypatch):
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'url = "{broker.http_url}"\nuser = "guest"\npassword = "guest"\n')
    monkeypatch.setenv("HEADRACE_CLI_CONFIG", str(cfg))
    r = CliRunner().invoke(cli, ["overview", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["product_name"] == "headrace"
    monkeypatch.setenv("HEADRACE_PASSWORD", "wrong")  # env beats the file
    assert CliRunner().invoke(cli, ["overview"]).exit_code == 1


def test_errors_are_one_plain_line_with_brackets_kept(broker):
    name = "[bold]" + "long-queue-name-" * 8 + "[/bold]"
    r = CliRunner().invoke(cli, ["queue", "delete", name, "--url", broker.http_url])
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and name in lines[0] and "(HTTP 404)" in lines[0]


def test_json_results_of_changes_vhost_env_and_consume_json(broker):
    vhost = f"v{uuid.uuid4().hex[:6]}"
    q = f"jq-{uuid.uuid4().hex[:6]}"
    r = run(broker, "vhost", "add", vhost, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"action": "added", "vhost": "/", "name": vhost}
    env = {"HEADRACE_VHOST": vhost}
    r = CliRunner().invoke(cli, ["queue", "declare", q, "--transient", "--json", "--url", broker.http_url], env=env)
    assert r.exit_code == 0 and json.loads(r.stdout) == {"action": "declared", "vhost": vhost, "queue": q}
    r = CliRunner().invoke(cli, ["publish", "", "-k", q, "--stdin-lines", "--json", "--url", broker.http_url],
                           env=env, input="a\nb\n")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == {"action": "published", "vhost": vhost, "exchange": "", "published": 2,
                                    "routed": 2, "unconfirmed": 0}
    r = CliRunner().invoke(cli, ["consume", q, "-n", "2", "--json", "--url", broker.http_url], env=env)
    assert r.exit_code == 0
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["payload"] for e in events] == ["a", "b"] and all("delivery_id" in e for e in events)
    r = CliRunner().invoke(cli, ["queue", "delete", q, "--json", "--url", broker.http_url], env=env)
    assert json.loads(r.stdout) == {"action": "deleted", "vhost": vhost, "queue": q}
    assert run(broker, "vhost", "delete", vhost).exit_code == 0


def test_publish_exits_1_when_the_broker_does_not_confirm(broker):
    q = f"full-{uuid.uuid4().hex[:6]}"
    assert run(broker, "queue", "declare", q, "--transient", "-a", "x-max-length=1",
               "-a", "x-overflow=reject-publish").exit_code == 0
    r = run(broker, "publish", "", "-k", q, "--stdin-lines", input="first\nsecond\n")
    assert r.exit_code == 1
    assert "published 2, routed 2" in r.stdout
    assert r.stderr == "Error: 1 of 2 messages were not confirmed by the broker\n"
    assert run(broker, "queue", "delete", q).exit_code == 0


def test_vhost_trace_switches_the_firehose(broker):
    vhost = f"t{uuid.uuid4().hex[:6]}"
    assert run(broker, "vhost", "add", vhost).exit_code == 0
    r = run(broker, "vhost", "trace", vhost, "on", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"action": "tracing", "vhost": "/", "name": vhost,
                                                        "tracing": True}
    rows = json.loads(run(broker, "vhost", "list", "--json").output)
    assert next(row for row in rows if row["name"] == vhost)["tracing"] is True
    r = run(broker, "vhost", "trace", vhost, "off")
    assert r.exit_code == 0 and f"tracing off for vhost {vhost}" in r.output
    rows = json.loads(run(broker, "vhost", "list", "--json").output)
    assert next(row for row in rows if row["name"] == vhost)["tracing"] is False
    r = run(broker, "vhost", "trace", "no-such-vhost", "on")
    assert r.exit_code == 1 and "(HTTP 404)" in r.stderr
    assert "no-such-vhost" not in [row["name"] for row in json.loads(run(broker, "vhost", "list", "--json").output)]
    assert run(broker, "vhost", "trace", vhost, "maybe").exit_code == 2
