"""A delayed exchange's page in the console, in a real browser against a real broker: its scheduled
messages counted by due time, as GET /api/exchanges/{vhost}/{name}/schedule gives them."""

from __future__ import annotations

import pika
import pytest
from e2e_support import unique, wait_until
from test_e2e_console import css, go, login, wait

pytestmark = pytest.mark.timeout(90)


def bin_count(driver, due: str) -> str:
    return css(driver, f'#schedule tr[data-due="{due}"] td.num').text


def test_delayed_exchange_page_shows_its_schedule(browser, broker, http):
    ex = unique("console-delayed")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    for delay, n in ((30 * 60_000, 3), (3 * 86_400_000, 2), (30 * 86_400_000, 4)):
        for _ in range(n):
            ch.basic_publish(ex, "k", b"later", pika.BasicProperties(headers={"x-delay": delay}))
    assert wait_until(lambda: http.get(f"/api/exchanges/%2F/{ex}").json().get("messages_delayed") == 9)
    base = broker.http_url
    login(browser, base)
    go(browser, base, f"exchange/%2F/{ex}")
    wait(browser, lambda d: "Scheduled messages: 9" in css(d, "#schedule-title").text)
    assert bin_count(browser, "3600") == "3" and bin_count(browser, "604800") == "2"
    assert bin_count(browser, "null") == "4" and bin_count(browser, "60") == "0"
    ch.exchange_delete(ex)
    conn.close()
    go(browser, base, "exchange/%2F/amq.direct")  # an exchange of another type has no schedule
    assert not browser.find_elements("css selector", "#schedule")
