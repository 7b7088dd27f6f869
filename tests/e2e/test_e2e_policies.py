"""Policies end to end: the HTTP API (httpx), the CLI, and their effect on live queues and
exchanges seen by unmodified pika, against a real headrace process. Each test's policies match only
its own names (the broker is shared by the module)."""

from __future__ import annotations

import json
import re

import httpx
import pika
import pika.exceptions
import pytest
from click.testing import CliRunner
from e2e_support import unique, wait_until
from headrace.cli.main import cli

pytestmark = pytest.mark.timeout(60)


def only(name: str) -> str:
    return "^" + re.escape(name) + "$"


def put(http: httpx.Client, name: str, pattern: str, definition: dict, *, operator: bool = False,
        **extra) -> httpx.Response:
    base = "/api/operator-policies" if operator else "/api/policies"
    return http.put(f"{base}/%2F/{name}", json={"pattern": pattern, "definition": definition, **extra})


def count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


@pytest.mark.parametrize("operator", [False, True])
def test_http_crud_with_rabbitmq_bodies_and_texts(http, operator):
    base = "/api/operator-policies" if operator else "/api/policies"
    name = unique("crud")
    assert put(http, name, "^crud", {"max-length": 10}, operator=operator, priority=3,
               **{"apply-to": "queues"}).status_code == 201
    expected = {"vhost": "/", "name": name, "pattern": "^crud", "apply-to": "queues",
                "definition": {"max-length": 10}, "priority": 3}
    assert http.get(f"{base}/%2F/{name}").json() == expected
    assert expected in http.get(base).json() and expected in http.get(f"{base}/%2F").json()
    assert put(http, name, "^crud", {"max-length": 5}, operator=operator).status_code == 204
    assert http.get(f"{base}/%2F/{name}").json()["definition"] == {"max-length": 5}
    refused = put(http, name, "^crud", {"max-length": 5, "colour": "blue"}, operator=operator)
    assert refused.status_code == 400
    assert refused.json() == {"error": "bad_request", "reason": "Validation failed\n\n"
                              '[{<<"colour">>,<<"blue">>}] are not recognised policy settings\n'}
    assert put(http, name, "^crud", {"max-length": -2}, operator=operator).json()["reason"] == \
        "Validation failed\n\n-2 is not a valid maximum length\n"
    assert http.delete(f"{base}/%2F/{name}").status_code == 204
    assert http.get(f"{base}/%2F/{name}").status_code == 404
    assert http.delete(f"{base}/%2F/{name}").status_code == 404
    assert http.get(f"{base}/nope-vhost").status_code == 404


def test_lower_max_length_drops_at_once_into_the_policy_dlx(conn, ch, http):
    q, dead = unique("pol-work"), unique("pol-dead")
    ch.queue_declare(dead, exclusive=True)
    ch.queue_declare(q, exclusive=True)
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    name = unique("cap")
    assert put(http, name, only(q), {"max-length": 2, "dead-letter-exchange": "",
                                     "dead-letter-routing-key": dead}).status_code == 201
    try:
        assert count(ch, q) == 2 and count(ch, dead) == 3
        method, props, body = ch.basic_get(dead, auto_ack=True)
        assert body == b"0" and props.headers["x-death"][0]["reason"] == "maxlen"
        assert ch.basic_get(q, auto_ack=True)[2] == b"3"
        row = http.get(f"/api/queues/%2F/{q}").json()
        assert (row["policy"], row["operator_policy"]) == (name, None)
        assert row["effective_policy_definition"] == {"max-length": 2, "dead-letter-exchange": "",
                                                      "dead-letter-routing-key": dead}
        assert row["arguments"] == {}  # the client's own arguments are untouched
    finally:
        http.delete(f"/api/policies/%2F/{name}")
    assert http.get(f"/api/queues/%2F/{q}").json()["policy"] is None
    for _ in range(3):
        ch.basic_publish("", q, b"more")
    assert count(ch, q) == 4  # no limit any more


def test_reject_publish_policy_nacks_and_x_argument_limit_is_lowered(conn, ch, http):
    q = unique("pol-reject")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 10})
    ch.confirm_delivery()
    name = unique("reject")
    put(http, name, only(q), {"max-length": 2, "overflow": "reject-publish"})
    try:
        ch.basic_publish("", q, b"1")
        ch.basic_publish("", q, b"2")
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", q, b"3")  # min(10 from the argument, 2 from the policy)
        assert count(ch, q) == 2
    finally:
        http.delete(f"/api/policies/%2F/{name}")
    ch.basic_publish("", q, b"3")
    assert count(ch, q) == 3


def test_argument_wins_for_dlx_and_a_new_policy_dlx_takes_the_next_dead_letter(conn, ch, http):
    q, first, second = unique("pol-dl"), unique("pol-dlq1"), unique("pol-dlq2")
    for name in (first, second):
        ch.queue_declare(name, exclusive=True)
    ch.queue_declare(q, exclusive=True)
    policy = unique("dlx")
    put(http, policy, only(q), {"dead-letter-exchange": "", "dead-letter-routing-key": first})
    try:
        for target in (first, second):
            ch.basic_publish("", q, b"to-" + target.encode())
            method, _, _ = ch.basic_get(q)
            ch.basic_reject(method.delivery_tag, requeue=False)
            assert wait_until(lambda: count(ch, target) == 1, conn)
            put(http, policy, only(q), {"dead-letter-exchange": "", "dead-letter-routing-key": second})
    finally:
        http.delete(f"/api/policies/%2F/{policy}")
    # a queue's own x-dead-letter-exchange beats a policy's
    own, own_dlq = unique("pol-own"), unique("pol-own-dlq")
    ch.queue_declare(own_dlq, exclusive=True)
    ch.queue_declare(own, exclusive=True, arguments={"x-dead-letter-exchange": "",
                                                     "x-dead-letter-routing-key": own_dlq})
    put(http, policy, only(own), {"dead-letter-exchange": "", "dead-letter-routing-key": first})
    try:
        ch.basic_publish("", own, b"mine")
        method, _, _ = ch.basic_get(own)
        ch.basic_reject(method.delivery_tag, requeue=False)
        assert wait_until(lambda: count(ch, own_dlq) == 1, conn)
        assert count(ch, first) == 1
    finally:
        http.delete(f"/api/policies/%2F/{policy}")


def test_alternate_exchange_policy_applies_to_an_existing_exchange(conn, ch, http):
    x, ae, caught = unique("pol-x"), unique("pol-ae"), unique("pol-caught")
    ch.exchange_declare(x, "direct", auto_delete=False)
    ch.exchange_declare(ae, "fanout", auto_delete=False)
    ch.queue_declare(caught, exclusive=True)
    ch.queue_bind(caught, ae)
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(x, "nowhere", b"lost", mandatory=True)
    name = unique("ae")
    put(http, name, only(x), {"alternate-exchange": ae}, **{"apply-to": "exchanges"})
    try:
        ch.basic_publish(x, "nowhere", b"caught", mandatory=True)
        assert ch.basic_get(caught, auto_ack=True)[2] == b"caught"
        assert http.get(f"/api/exchanges/%2F/{x}").json()["policy"] == name
    finally:
        http.delete(f"/api/policies/%2F/{name}")
        ch.exchange_delete(x)
        ch.exchange_delete(ae)


def test_operator_policy_caps_the_user_policy(conn, ch, http):
    q = unique("pol-capped")
    ch.queue_declare(q, exclusive=True)
    user, operator = unique("user"), unique("op")
    put(http, user, only(q), {"max-length": 100, "message-ttl": 60000}, priority=1)
    put(http, operator, only(q), {"max-length": 3}, operator=True)
    try:
        for i in range(6):
            ch.basic_publish("", q, b"%d" % i)
        assert count(ch, q) == 3
        row = http.get(f"/api/queues/%2F/{q}").json()
        assert (row["policy"], row["operator_policy"]) == (user, operator)
        assert row["effective_policy_definition"] == {"max-length": 3, "message-ttl": 60000}
    finally:
        http.delete(f"/api/policies/%2F/{user}")
        http.delete(f"/api/operator-policies/%2F/{operator}")


def cli_run(broker, *args):
    return CliRunner().invoke(cli, [*args, "--url", broker.http_url], catch_exceptions=False)


def test_cli_policy_set_list_clear(broker, conn, ch):
    q, name = unique("cli-pol"), unique("cli-pol")
    ch.queue_declare(q, exclusive=True)
    r = cli_run(broker, "policy", "set", name, only(q), '{"max-length": 1}', "--priority", "4", "--apply-to", "queues")
    assert r.exit_code == 0, r.output
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    assert count(ch, q) == 1
    rows = json.loads(cli_run(broker, "policy", "list", "--json").output)
    assert {"vhost": "/", "name": name, "pattern": only(q), "apply-to": "queues",
            "definition": {"max-length": 1}, "priority": 4} in rows
    bad = cli_run(broker, "policy", "set", name, "^x", '{"nonsense": 1}')
    assert bad.exit_code == 1 and "are not recognised policy settings" in bad.output
    assert cli_run(broker, "policy", "set", name, "^x", "{not json").exit_code == 2
    assert cli_run(broker, "policy", "clear", name).exit_code == 0
    assert cli_run(broker, "policy", "clear", name).exit_code == 1
    r = cli_run(broker, "policy", "set", name, only(q), '{"max-length": 5}', "--operator")
    assert r.exit_code == 0
    assert name in [row["name"] for row in json.loads(cli_run(broker, "policy", "list", "--operator", "--json").output)]
    assert "max-length" in cli_run(broker, "policy", "list", "--operator").output  # the table
    assert cli_run(broker, "policy", "clear", name, "--operator").exit_code == 0


def test_policies_are_durable(broker_factory, tmp_path):
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data)
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert put(http, "keep", "^kept$", {"max-length": 1}).status_code == 201
        assert put(http, "cap", "^kept$", {"max-length": 1}, operator=True).status_code == 201
    assert proc.stop() == 0
    proc = broker_factory(data_dir=data)
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/policies/%2F/keep").json()["definition"] == {"max-length": 1}
        assert http.get("/api/operator-policies/%2F/cap").status_code == 200
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        ch.queue_declare("kept")
        ch.basic_publish("", "kept", b"1")
        ch.basic_publish("", "kept", b"2")
        assert count(ch, "kept") == 1
        conn.close()
