"""RabbitMQ 3.10's own management UI, served as static files with ``/api/*`` forwarded to a real
broker (``rabbitmq_ui.py``), driven in the test Chromium as a user drives it: login, every page with
no JavaScript error in the browser log, a chart, queue publish and get, definitions download and
upload, and the user, vhost and policy forms. Each effect is checked through the API as well."""

from __future__ import annotations

import json
from pathlib import Path

from urllib.parse import quote

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from rabbitmq_ui import WWW, UIServer
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.timeout(120)
NODE = "headrace@localhost"
PAGES = {"": "Overview", "connections": "Connections", "channels": "Channels", "exchanges": "Exchanges",
         "queues": "Queues", "users": "Users", "vhosts": "Virtual Hosts", "policies": "Policies",
         f"nodes/{NODE}": "Node", "exchanges/%2F/amq.direct": "Exchange: amq.direct", "users/guest": "User: guest",
         "vhosts/%2F": "Virtual Host: /", "feature-flags": "Feature Flags", "limits": "Limits",
         "cluster-name": "Cluster name"}


# the UI re-renders its page on each refresh and slides its sections open: an element found may be
# gone, or not yet clickable, by the time it is used; the step is then tried again
RETRY = (NoSuchElementException, StaleElementReferenceException, ElementNotInteractableException,
         ElementClickInterceptedException)
# open every collapsed section of the page, as a user clicks its title ("Add a new queue", ...); only
# closed ones, since a click toggles
SHOW_SECTIONS = ("document.querySelectorAll('#main div.section-hidden:not(.section-visible) > h2,"
                 " #main div.section.section-invisible > h2').forEach(h => h.click())")


def wait(driver: WebDriver, cond, timeout: float = 10.0, message: str = ""):
    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=RETRY).until(cond, message)


def js_errors(driver: WebDriver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def submit(driver: WebDriver, action: str, values: dict[str, str], before=None) -> None:
    """Open the form whose action is ``action``, fill it (``before(form)`` first, if given) and
    submit it, as the user would; all again if a refresh re-rendered it meanwhile."""
    def attempt(d: WebDriver) -> bool:
        form = d.find_element(By.CSS_SELECTOR, f'form[action="{action}"]')
        button = form.find_element(By.CSS_SELECTOR, 'input[type="submit"]')
        if not button.is_displayed():
            d.execute_script(SHOW_SECTIONS)
            return False
        if before is not None:
            before(form)
        for name, value in values.items():
            field = form.find_element(By.NAME, name)
            field.clear()
            field.send_keys(value)
        button.click()
        return True
    wait(driver, attempt)


@pytest.fixture(scope="module")
def ui(broker):
    assert (WWW / "index.html").exists(), "make test unpacks the UI from Debian's rabbitmq-server package"
    with UIServer(broker.http_url) as server:
        yield server


@pytest.fixture
def page(browser, ui):
    browser.get(ui.url + "/")
    browser.delete_all_cookies()
    browser.execute_script("localStorage.clear()")
    browser.get(ui.url + "/")
    wait(browser, lambda d: d.find_element(By.NAME, "username").is_displayed())
    submit(browser, "#/login", {"username": "guest", "password": "guest"})
    wait(browser, lambda d: "Overview" in d.find_element(By.CSS_SELECTOR, "#main h1").text)
    browser.get_log("browser")  # start each test with an empty log
    browser.execute_script("window.confirm = function() { return true; }")
    return browser


def go(driver: WebDriver, base: str, route: str, title: str) -> None:
    driver.get(f"{base}/#/{route}")
    try:
        # the page's title (an h2 on the connection page)
        wait(driver, lambda d: title in d.find_element(By.CSS_SELECTOR, "#main h1, #main h2").text)
    except Exception:
        raise AssertionError(f"{route}: {driver.find_element(By.CSS_SELECTOR, '#main').text[:300]!r} "
                             f"{js_errors(driver)}") from None


def test_every_page_renders_without_javascript_errors_and_with_charts(page, ui, broker):
    q = unique("pageq")
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as conn:
        conn.channel().queue_declare(q)
        conn.process_data_events(0)
        with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
            connection = http.get("/api/connections").json()[0]["name"]
            channel = http.get("/api/channels").json()[0]["name"]
        pages = {**PAGES, f"queues/%2F/{q}": f"Queue {q}", f"connections/{quote(connection, safe='')}": "Connection",
                 f"channels/{quote(channel, safe='')}": "Channel"}
        for route, title in pages.items():
            go(page, ui.url, route, title)
            if route in ("", f"queues/%2F/{q}", f"nodes/{NODE}"):
                # the charts are drawn from the samples of the *_details (the node's in a hidden section)
                wait(page, lambda d: d.find_elements(By.CSS_SELECTOR, "#main div.chart canvas"))
            assert js_errors(page) == [], route


def test_queue_publish_and_get_through_the_forms(page, ui, broker):
    q = unique("uiq")
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
        go(page, ui.url, f"queues/%2F/{q}", q)
        submit(page, "#/exchanges/publish", {"payload": "hello from the UI"})
        wait(page, lambda d: http.get(f"/api/queues/%2F/{q}").json()["messages"] == 1)
        page.execute_script("window.confirm = function() { return true; }")
        submit(page, "#/queues/get", {})
        wait(page, lambda d: "hello from the UI" in d.find_element(By.CSS_SELECTOR, "pre.msg-payload").text)
    assert js_errors(page) == []


def test_definitions_download_and_upload(page, ui, broker, tmp_path: Path):
    """The overview's "Download broker definitions" saves the file (the link carries the login in
    its ``auth`` parameter), and "Upload broker definitions" imports one (a multipart form)."""
    q = unique("uploaded")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    page.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    go(page, ui.url, "", "Overview")
    click_button_id(page, "download-definitions")

    def saved() -> list[Path]:
        return [p for p in downloads.iterdir() if p.suffix == ".json"]
    wait(page, lambda d: saved())
    assert "queues" in json.loads(saved()[0].read_text())
    doc = {"queues": [{"name": q, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}]}
    upload = tmp_path / "defs.json"
    upload.write_text(json.dumps(doc))

    def choose_file(d: WebDriver) -> bool:
        field = d.find_element(By.CSS_SELECTOR, 'input[type="file"][name="file"]')
        if not field.is_displayed():
            d.execute_script(SHOW_SECTIONS)
            return False
        field.send_keys(str(upload))
        d.find_element(By.CSS_SELECTOR, 'input[value="Upload broker definitions"]').click()
        return True
    wait(page, choose_file)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        wait(page, lambda d: http.get(f"/api/queues/%2F/{q}").status_code == 200)
    assert js_errors(page) == []


def test_policy_form(page, ui, broker):
    name = unique("uipolicy")
    go(page, ui.url, "policies", "Policies")

    def max_length_10(form) -> None:  # the "Max length" shortcut fills the key, the user the value
        form.find_element(By.CSS_SELECTOR, 'span.argument-link[key="max-length"]').click()
        value = form.find_element(By.CSS_SELECTOR, '#definition .mf input[name$="_mfvalue"]')
        value.clear()
        value.send_keys("10")
    submit(page, "#/policies", {"name": name, "pattern": "^ui-policy-"}, before=max_length_10)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        wait(page, lambda d: http.get(f"/api/policies/%2F/{name}").status_code == 200)
        policy = http.get(f"/api/policies/%2F/{name}").json()
    assert policy["pattern"] == "^ui-policy-" and policy["definition"] == {"max-length": 10}
    assert js_errors(page) == []


def test_user_and_vhost_forms(page, ui, broker):
    user, vhost = unique("uiuser"), unique("uivhost")
    go(page, ui.url, "users", "Users")
    submit(page, "#/users-add", {"username": user, "password": "pw", "password_confirm": "pw", "tags": "management"})
    go(page, ui.url, "vhosts", "Virtual Hosts")
    submit(page, "#/vhosts", {"name": vhost})
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        wait(page, lambda d: http.get(f"/api/users/{user}").status_code == 200)
        assert http.get(f"/api/users/{user}").json()["tags"] in (["management"], "management")
        wait(page, lambda d: http.get(f"/api/vhosts/{vhost}").status_code == 200)
    assert js_errors(page) == []


def click_button_id(driver: WebDriver, element_id: str) -> None:
    """Click the element with that id, its section opened first."""
    def attempt(d: WebDriver) -> bool:
        button = d.find_element(By.ID, element_id)
        if not button.is_displayed():
            d.execute_script(SHOW_SECTIONS)
            return False
        button.click()
        return True
    wait(driver, attempt)


def click_button(driver: WebDriver, label: str) -> None:
    """Click the button labelled ``label``, its section opened first."""
    def attempt(d: WebDriver) -> bool:
        button = d.find_element(By.XPATH, f"//input[@type='submit' and @value='{label}']")
        if not button.is_displayed():
            d.execute_script(SHOW_SECTIONS)
            return False
        button.click()
        return True
    wait(driver, attempt)


def test_queue_exchange_and_connection_actions(page, ui, broker):
    """Add a queue and an exchange through their forms, purge and delete the queue, close a
    connection from its page: each button's effect seen through the API."""
    q, x = unique("uiadd"), unique("uix")
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        go(page, ui.url, "queues", "Queues")
        submit(page, "#/queues", {"name": q})
        wait(page, lambda d: http.get(f"/api/queues/%2F/{q}").status_code == 200)
        go(page, ui.url, "exchanges", "Exchanges")
        submit(page, "#/exchanges", {"name": x})
        wait(page, lambda d: http.get(f"/api/exchanges/%2F/{x}").status_code == 200)
        assert http.post("/api/exchanges/%2F/amq.default/publish", json={
            "routing_key": q, "payload": "p", "payload_encoding": "string", "properties": {}}).json()["routed"]
        go(page, ui.url, f"queues/%2F/{q}", f"Queue {q}")
        click_button(page, "Purge Messages")
        wait(page, lambda d: http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0)
        click_button(page, "Delete Queue")
        wait(page, lambda d: http.get(f"/api/queues/%2F/{q}").status_code == 404)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
        try:
            assert wait_until(lambda: len(http.get("/api/connections").json()) == 1)
            name = http.get("/api/connections").json()[0]["name"]
            go(page, ui.url, f"connections/{quote(name, safe='')}", "Connection")
            click_button(page, "Force Close")
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker):  # the client is told (320)
                wait_until(lambda: False, conn, timeout=5)
            assert wait_until(lambda: http.get("/api/connections").json() == [])
        finally:
            if conn.is_open:
                conn.close()
    assert js_errors(page) == []
