"""The CLI's rabbitmqctl habits against a real broker: positional permissions, connections closed
by the name `connections list` shows, queue list across vhosts, queue types, user add refusing to
overwrite, global options before the subcommand, --format and definitions export's summary."""

from __future__ import annotations

import json
import time
import uuid

import pika
import pytest
from click.testing import CliRunner
from headrace.cli.main import cli

pytestmark = pytest.mark.timeout(60)


def run(broker, *args, input=None):
    return CliRunner().invoke(cli, [*args, "--url", broker.http_url], input=input, catch_exceptions=False)


def _perms_of(broker, user):
    rows = json.loads(run(broker, "permissions", "list", "--json").output)
    return next(r for r in rows if r["user"] == user)


def test_permissions_set_positionally_and_with_options(broker):
    name = f"p{uuid.uuid4().hex[:6]}"
    assert run(broker, "user", "add", name, "--new-password", "pw").exit_code == 0
    r = run(broker, "permissions", "set", name, "^c", "^w", "^r")
    assert r.exit_code == 0, r.output
    row = _perms_of(broker, name)
    assert (row["configure"], row["write"], row["read"]) == ("^c", "^w", "^r")
    assert run(broker, "permissions", "set", name, "--write", "^x").exit_code == 0
    row = _perms_of(broker, name)
    assert (row["configure"], row["write"], row["read"]) == (".*", "^x", ".*")
    r = run(broker, "permissions", "set", name, "^c", "^w")
    assert r.exit_code == 2 and "3 patterns" in r.output
    run(broker, "user", "delete", name)


def test_user_add_of_an_existing_user_refuses_unless_update(broker):
    name = f"u{uuid.uuid4().hex[:6]}"
    assert run(broker, "user", "add", name, "--new-password", "pw1", "--tags", "management").exit_code == 0
    r = run(broker, "user", "add", name, "--new-password", "pw2")
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: user '{name}' already exists (--update changes its password and tags)"
    users = {u["name"]: u for u in json.loads(run(broker, "user", "list", "--json").output)}
    assert users[name]["tags"] in ("management", ["management"])  # untouched
    r = run(broker, "user", "add", name, "--new-password", "pw2", "--tags", "monitoring", "--update")
    assert r.exit_code == 0 and f"user {name} updated" in r.output
    users = {u["name"]: u for u in json.loads(run(broker, "user", "list", "--json").output)}
    assert users[name]["tags"] in ("monitoring", ["monitoring"])
    run(broker, "user", "delete", name)


def test_queue_list_across_vhosts_and_queue_types(broker):
    vh, q1, q2 = f"vh-{uuid.uuid4().hex[:6]}", f"qa-{uuid.uuid4().hex[:6]}", f"qq-{uuid.uuid4().hex[:6]}"
    assert run(broker, "vhost", "add", vh).exit_code == 0
    assert run(broker, "permissions", "set", "guest", ".*", ".*", ".*", "--vhost", vh).exit_code == 0
    assert run(broker, "queue", "declare", q1).exit_code == 0
    r = run(broker, "queue", "declare", q2, "--type", "quorum", "--vhost", vh)
    assert r.exit_code == 0, r.output
    rows = json.loads(run(broker, "queue", "list", "--json").output)
    by_name = {row["name"]: row for row in rows}
    assert by_name[q1]["vhost"] == "/" and by_name[q2]["vhost"] == vh
    assert by_name[q2]["type"] == "quorum"
    rows = json.loads(run(broker, "queue", "list", "--vhost", vh, "--json").output)
    assert [row["name"] for row in rows] == [q2]
    r = run(broker, "queue", "list", "--format", "tsv")
    lines = r.output.splitlines()
    assert lines[0].split("\t")[:2] == ["vhost", "name"]
    assert f"{vh}\t{q2}\tquorum" in r.output
    r = run(broker, "queue", "declare", f"s-{uuid.uuid4().hex[:6]}", "--type", "stream", "--vhost", vh)
    assert r.exit_code == 0, r.output
    assert "stream" in {row["type"] for row in json.loads(run(broker, "queue", "list", "--vhost", vh, "--json").output)}
    r = run(broker, "queue", "declare", "x", "--type", "lazy")
    assert r.exit_code == 2
    run(broker, "queue", "delete", q1)
    run(broker, "vhost", "delete", vh)


def test_global_options_before_the_subcommand(broker):
    r = CliRunner().invoke(cli, ["--url", broker.http_url, "--format", "json", "vhost", "list"])
    assert r.exit_code == 0, r.output
    assert "/" in {row["name"] for row in json.loads(r.output)}
    r = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:1", "vhost", "list", "--url", broker.http_url, "--json"])
    assert r.exit_code == 0, r.output  # the flag after the subcommand wins
    r = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:1", "vhost", "list"])
    assert r.exit_code == 3


def test_table_fits_the_terminal_width(broker):
    q = "w" + "x" * 150
    assert run(broker, "queue", "declare", q, "--transient").exit_code == 0
    r = CliRunner().invoke(cli, ["queue", "list", "--url", broker.http_url], env={"COLUMNS": "60"})
    assert r.exit_code == 0
    assert max(len(line) for line in r.output.splitlines()) <= 60
    run(broker, "queue", "delete", q)


def test_connections_closed_by_the_name_the_list_shows(broker):
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": f"app-{uuid.uuid4().hex[:6]}"}
    conn = pika.BlockingConnection(params)
    try:
        rows = json.loads(run(broker, "connections", "list", "--json").output)
        row = next(r for r in rows if r.get("user_provided_name") == params.client_properties["connection_name"])
        table = run(broker, "connections", "list", "--format", "tsv").output
        assert table.splitlines()[0].startswith("name\t") and row["name"] in table
        r = run(broker, "connections", "close", row["name"])
        assert r.exit_code == 0 and f"connection {row['name']} closed" in r.output
        deadline = time.monotonic() + 5
        while conn.is_open and time.monotonic() < deadline:
            try:
                conn.process_data_events(time_limit=0.1)
            except pika.exceptions.AMQPError:
                break
        assert not conn.is_open
    finally:
        if conn.is_open:
            conn.close()
    conn = pika.BlockingConnection(params)
    try:
        r = run(broker, "connections", "close", params.client_properties["connection_name"])
        assert r.exit_code == 0, r.output
    finally:
        if conn.is_open:
            try:
                conn.close()
            except pika.exceptions.AMQPError:
                pass
    r = run(broker, "connections", "close", "nobody")
    assert r.exit_code == 1 and "no connection 'nobody'" in r.output


def test_definitions_export_says_what_it_wrote(broker, tmp_path):
    out = tmp_path / "defs.json"
    r = run(broker, "definitions", "export", str(out))
    assert r.exit_code == 0
    doc = json.loads(out.read_text())
    line = r.output.strip()
    assert line.startswith(f"exported definitions to {out}: ")
    assert f"{len(doc['users'])} users" in line and f"{len(doc['queues'])} queues" in line
    r = CliRunner().invoke(cli, ["definitions", "export", "--url", broker.http_url])
    assert r.exit_code == 0
    assert json.loads(r.stdout)["users"]  # stdout stays JSON, the summary goes to stderr
    assert "exported definitions to stdout" in r.stderr
