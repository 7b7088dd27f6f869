"""The console's shovel page and a queue's "Move messages", in a real browser against a real broker:
a dead-letter queue's messages go back to the queue their x-death names, and a shovel is added,
shown running and deleted from the page."""

from __future__ import annotations

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from selenium.webdriver.common.by import By
from test_e2e_console import confirm, css, fill, go, login, row, wait

pytestmark = pytest.mark.timeout(90)


def count(http: httpx.Client, queue: str) -> int:
    r = http.get(f"/api/queues/%2F/{queue}")
    return int(r.json().get("messages", 0)) if r.status_code == 200 else -1


def test_move_messages_sends_dead_letters_back_to_their_origin(browser, broker, http):
    origin, dlq = unique("origin"), unique("dlq")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(5):
        ch.basic_publish("", origin, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    for _ in range(5):
        method, _, _ = ch.basic_get(origin)
        ch.basic_reject(method.delivery_tag, requeue=False)
    conn.close()
    assert wait_until(lambda: count(http, dlq) == 5)

    base = broker.http_url
    login(browser, base)
    go(browser, base, f"queue/%2F/{dlq}")
    css(browser, "#move-from-x-death").click()
    wait(browser, lambda d: css(d, "#move-destination").get_attribute("value") == origin)
    css(browser, "#move-form button[type=submit]").click()
    assert wait_until(lambda: count(http, origin) == 5 and count(http, dlq) == 0, timeout=10)
    assert wait_until(lambda: http.get(f"/api/parameters/shovel/%2F/Move from {dlq}").status_code == 404)


def test_shovel_page_adds_shows_and_deletes_a_shovel(browser, broker, http):
    name, src, dest = unique("page-shovel"), unique("page-src"), unique("page-dst")
    base = broker.http_url
    login(browser, base)
    go(browser, base, "shovels")
    fill(browser, {"#shovel-name": name, "#shovel-src": src, "#shovel-dest": dest})
    css(browser, "#add-shovel-form button[type=submit]").click()
    wait(browser, lambda d: "running" in row(d, "shovels", f"/|{name}").text)
    assert http.get(f"/api/parameters/shovel/%2F/{name}").json()["value"]["src-queue"] == src
    row(browser, "shovels", f"/|{name}").find_element(By.TAG_NAME, "button").click()
    confirm(browser)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#shovels tr[data-key="/|{name}"]'))
    assert http.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404


def test_shovel_page_lists_a_federated_queues_link(browser, broker, http):
    q = unique("console-fq")
    upstream = unique("nowhere")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_declare(q, durable=True)
    conn.close()
    assert http.put(f"/api/parameters/federation-upstream/%2F/{upstream}", json={"value": {
        "uri": "amqp://127.0.0.1:1", "reconnect-delay": 30}}).status_code == 201
    assert http.put(f"/api/policies/%2F/{q}", json={"pattern": f"^{q}$", "apply-to": "queues",
                                                     "definition": {"federation-upstream": upstream}}).status_code == 201
    base = broker.http_url
    login(browser, base)
    go(browser, base, "shovels")
    link = f"//{q}/{upstream}"  # the link's id: vhost, queue, upstream
    wait(browser, lambda d: f"queue {q}" in row(d, "federation-links", link).text)
    assert q in row(browser, "federation-links", link).text.split(f"queue {q}", 1)[1]  # the upstream queue
    http.delete(f"/api/policies/%2F/{q}")
    http.delete(f"/api/parameters/federation-upstream/%2F/{upstream}")
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#federation-links tr[data-key="{link}"]'))
