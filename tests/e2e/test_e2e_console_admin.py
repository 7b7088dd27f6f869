"""The console's Admin tab beyond users and policies, in a real browser against a real broker:
operator policies, topic permissions, feature flags, and the definitions document saved to a file
and read back from one. Each change made in the page is checked through the API or a real client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from pika.exceptions import ChannelClosedByBroker
from selenium.webdriver.common.by import By
from test_e2e_console import click, confirm, css, fill, go, login, row, wait

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def admin(browser, broker) -> Iterator[httpx.Client]:
    """The Admin tab open as guest, and an API client to check what it did; no JavaScript error
    may be logged while the test runs (a refused request the page shows is logged too, not counted)."""
    login(browser, broker.http_url)
    go(browser, broker.http_url, "admin")
    browser.get_log("browser")  # only this test's messages count
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=5) as http:
        yield http
    assert [e["message"] for e in browser.get_log("browser")
            if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]] == []


def test_operator_policy_caps_a_queue_over_the_users_policy(browser, broker, admin):
    q, user_policy, op_policy = unique("capped"), unique("user-policy"), unique("op-policy")
    admin.put(f"/api/queues/%2F/{q}", json={"durable": False})
    admin.put(f"/api/policies/%2F/{user_policy}", json={"pattern": f"^{q}$", "definition": {"max-length": 100},
                                                         "apply-to": "queues"})
    fill(browser, {"#op-policy-name": op_policy, "#op-policy-pattern": f"^{q}$", "#op-policy-apply-to": "queues",
                   "#op-policy-definition": '{"max-length": 3}'})
    css(browser, "#add-operator-policy-form button[type=submit]").click()
    wait(browser, lambda d: '"max-length":3' in row(d, "operator-policies", f"/|{op_policy}").text)
    shown = admin.get(f"/api/queues/%2F/{q}").json()  # the lower of the two limits applies
    assert (shown["policy"], shown["operator_policy"]) == (user_policy, op_policy)
    assert shown["effective_policy_definition"]["max-length"] == 3
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    for i in range(5):
        ch.basic_publish("", q, f"m{i}".encode())
    conn.close()
    assert wait_until(lambda: admin.get(f"/api/queues/%2F/{q}").json()["messages"] == 3, timeout=10)
    fill(browser, {"#op-policy-name": unique("op-bad"), "#op-policy-definition": '{"alternate-exchange": "x"}'})
    css(browser, "#add-operator-policy-form button[type=submit]").click()  # RabbitMQ's refusal, by the form
    wait(browser, lambda d: css(d, "#add-operator-policy-form .error").text != "")
    click(browser, lambda d: row(d, "operator-policies", f"/|{op_policy}").find_element(By.CSS_SELECTOR, "button"))
    confirm(browser)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#operator-policies tr[data-key="/|{op_policy}"]'))
    assert admin.get(f"/api/operator-policies/%2F/{op_policy}").status_code == 404
    admin.delete(f"/api/policies/%2F/{user_policy}")
    admin.delete(f"/api/queues/%2F/{q}")


def test_topic_permission_limits_publishes_and_is_cleared(browser, broker, admin):
    name = unique("topic-user")
    assert admin.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    admin.put(f"/api/permissions/%2F/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
    fill(browser, {"#topic-perm-user": name, "#topic-perm-exchange": "amq.topic", "#topic-perm-write": r"^allowed\."})
    css(browser, "#set-topic-permission-form button[type=submit]").click()
    key = f"{name}|/|amq.topic"
    wait(browser, lambda d: r"^allowed\." in row(d, "topic-permissions", key).text)
    assert admin.get(f"/api/topic-permissions/%2F/{name}").json() == [
        {"user": name, "vhost": "/", "exchange": "amq.topic", "write": r"^allowed\.", "read": ".*"}]
    url = broker.url.replace("guest:guest@", f"{name}:pw@")
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("amq.topic", "allowed.one", b"ok")
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.basic_publish("amq.topic", "other.one", b"no")
    assert refused.value.reply_code == 403
    conn.close()
    click(browser, lambda d: row(d, "topic-permissions", key).find_element(By.CSS_SELECTOR, "button"))
    confirm(browser)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#topic-permissions tr[data-key="{key}"]'))
    assert admin.get(f"/api/topic-permissions/%2F/{name}").status_code == 404
    admin.delete(f"/api/users/{name}")


def test_feature_flags_are_listed_with_their_state(browser, broker, admin):
    listed = {f["name"]: f["state"] for f in admin.get("/api/feature-flags").json()}
    wait(browser, lambda d: "enabled" in row(d, "feature-flags", "stream_queue").text)
    shown = browser.find_elements(By.CSS_SELECTOR, "#feature-flags tbody tr")
    assert {r.get_attribute("data-key") for r in shown} == set(listed)
    assert "Support queues of type `stream`" in row(browser, "feature-flags", "stream_queue").text


def test_definitions_export_saves_a_file_and_import_reads_one(browser, broker, admin, tmp_path: Path):
    vhost, kept, imported = unique("defs-vhost"), unique("exported"), unique("imported")
    admin.put(f"/api/vhosts/{vhost}")
    admin.put(f"/api/queues/{vhost}/{kept}", json={"durable": True})
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    go(browser, broker.http_url, "admin")  # the vhost just made is offered
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#definitions-export-vhost option[value="{vhost}"]'))
    fill(browser, {"#definitions-export-vhost": vhost})
    css(browser, "#export-definitions-form button[type=submit]").click()

    def saved() -> list[Path]:
        return [p for p in downloads.iterdir() if p.suffix == ".json"]
    wait(browser, lambda d: saved())
    doc = json.loads(saved()[0].read_text())
    assert [q["name"] for q in doc["queues"]] == [kept] and "users" not in doc
    assert saved()[0].name in css(browser, "#definitions-exported").text
    assert "1 queues" in css(browser, "#definitions-exported").text
    doc["queues"] = [{"name": imported, "durable": True, "auto_delete": False, "arguments": {"x-max-length": 9}}]
    upload = tmp_path / "defs.json"
    upload.write_text(json.dumps(doc))
    css(browser, "#definitions-file").send_keys(str(upload))
    fill(browser, {"#definitions-import-vhost": vhost})
    css(browser, "#import-definitions-form button[type=submit]").click()
    wait(browser, lambda d: any("defs.json" in t.text for t in d.find_elements(By.CSS_SELECTOR, ".toast")))
    assert admin.get(f"/api/queues/{vhost}/{imported}").json()["arguments"] == {"x-max-length": 9}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    css(browser, "#definitions-file").send_keys(str(bad))
    css(browser, "#import-definitions-form button[type=submit]").click()
    wait(browser, lambda d: "bad.json is not a JSON document" in css(d, "#import-definitions-form .error").text)
    admin.delete(f"/api/vhosts/{vhost}")
