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
