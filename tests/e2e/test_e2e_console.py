"""The web console in a real browser (headless Debian Chromium) against a real broker.

Everything the console shows or changes goes through the management API, so these tests act in
the page the way a user does and check the effect both on screen and through the API. Screenshots
of every tab land in tests/artifacts/ (not committed).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import unique
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

pytestmark = pytest.mark.timeout(90)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WAIT = 10.0
TABS = ("overview", "connections", "channels", "exchanges", "queues", "streams", "admin", "mirrors")

TABS = ("overview", "connections", "channels", "exchanges", "queues", "admin", "mirrors", "shovels")


def wait(driver: WebDriver, cond, timeout: float = WAIT):
    """Poll ``cond(driver)`` until it is truthy (a re-rendered element is simply looked up again)."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(cond)


def css(driver: WebDriver, selector: str):
    return driver.find_element(By.CSS_SELECTOR, selector)


def text_of(selector: str):
    return lambda d: d.find_element(By.CSS_SELECTOR, selector).text


def login(driver: WebDriver, base: str, user: str = "guest", password: str = "guest") -> None:
    driver.get(base + "/#/overview")
    driver.execute_script("sessionStorage.clear()")
    # a fresh page: the one just loaded may have read the previous test's login from sessionStorage
    # and still be logging in with it; the reloaded one finds none and shows the form
    driver.refresh()
    wait(driver, lambda d: css(d, "#login").is_displayed())
    css(driver, "#login-user").send_keys(user)
    css(driver, "#login-password").send_keys(password, Keys.ENTER)  # the keyboard alone logs in
    wait(driver, lambda d: css(d, "#shell").is_displayed() and user in css(d, "#whoami").text)


def go(driver: WebDriver, base: str, route: str) -> None:
    """Open a route and wait for its first refresh to finish."""
    before = driver.execute_script("return document.getElementById('main').dataset.refreshed || ''")
    driver.get(f"{base}/#/{route}")
    wait(driver, lambda d: d.execute_script("return document.getElementById('main').dataset.refreshed || ''")
         not in ("", before))


def click(driver: WebDriver, locate) -> None:
    """Click an element of a list that refreshes on its own: found again if it was re-rendered."""
    def attempt(d: WebDriver) -> bool:
        locate(d).click()
        return True
    wait(driver, attempt)


def fill(driver: WebDriver, values: dict[str, str]) -> None:
    for selector, value in values.items():
        el = css(driver, selector)
        if el.tag_name == "select":
            Select(el).select_by_value(value)
        else:
            el.clear()
            el.send_keys(value)


def confirm(driver: WebDriver) -> None:
    wait(driver, lambda d: css(d, "#confirm").get_attribute("open") is not None)
    css(driver, "#confirm-ok").click()


def shot(driver: WebDriver, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"console-{name}.png"))


def row(driver: WebDriver, list_id: str, key: str):
    return driver.find_element(By.CSS_SELECTOR, f'#{list_id} tr[data-key="{key}"]')


def test_console_files_are_served_without_a_login_and_nothing_else_is(broker):
    with httpx.Client(base_url=broker.http_url, timeout=5) as http:
        index = http.get("/")
        assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
        assert 'src="/console/app.js"' in index.text and "cache-control" in index.headers
        js = http.get("/console/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "max-age" in js.headers["cache-control"]
        assert http.get("/console/style.css").headers["content-type"].startswith("text/css")
        for path in ("/console/..%2Fapi.py", "/console/%2e%2e%2fconsole.py", "/console/%2e%2e",
                     "/console/console.py", "/console/nothing.js"):
            assert http.get(path).status_code == 404, path
        assert http.get("/api/overview").status_code == 401  # the data still needs a login


def test_wrong_password_is_refused_on_the_login_form(browser, broker):
    browser.get(broker.http_url + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait(browser, lambda d: css(d, "#login").is_displayed())
    css(browser, "#login-user").send_keys("guest")
    css(browser, "#login-password").send_keys("wrong", Keys.ENTER)
    wait(browser, lambda d: css(d, "#login-error").text == "Login failed")
    assert browser.execute_script("return sessionStorage.getItem('headrace.auth')") is None


def test_declare_publish_see_count_and_rate_get_back(browser, broker):
    base = broker.http_url
    q = unique("console-q")
    login(browser, base)
    go(browser, base, "queues")
    fill(browser, {"#queue-name": q, "#queue-durable": "false"})
    css(browser, "#add-queue-form button[type=submit]").click()
    wait(browser, lambda d: row(d, "queues", f"/|{q}"))
    css(browser, "#queues-filter").send_keys(q)  # the API filters by name: only this queue is left
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 1
         and row(d, "queues", f"/|{q}"))

    # bind it to amq.direct from its page, then publish from the exchange's page
    click(browser, lambda d: row(d, "queues", f"/|{q}").find_element(By.TAG_NAME, "a"))
    wait(browser, lambda d: css(d, "#queue-ready dd").text == "0")
    fill(browser, {"#bind-other": "amq.direct", "#bind-key": q})
    css(browser, "#bind-key").send_keys(Keys.ENTER)
    wait(browser, lambda d: row(d, "bindings", f"amq.direct|{q}|{q}"))

    go(browser, base, "exchange/%2F/amq.direct")
    wait(browser, lambda d: row(d, "bindings", f"amq.direct|{q}|{q}"))
    fill(browser, {"#publish-routing-key": q, "#publish-payload": "hello from the console",
                   "#publish-headers": '{"x-origin": "browser"}'})
    css(browser, "#publish-form button[type=submit]").click()
    wait(browser, lambda d: "Message published." in d.find_element(By.CSS_SELECTOR, ".toast").text)

    go(browser, base, f"queue/%2F/{q}")
    Select(css(browser, "#refresh")).select_by_value("2000")
    wait(browser, lambda d: css(d, "#queue-ready dd").text == "1")
    # the publish is in the broker's history from its next sample (every 5 s) on: a bump in the chart
    heights = lambda d: {p.split(",")[1] for p in css(d, 'polyline[data-series="publish"]').get_attribute("points")
                         .split()}
    wait(browser, lambda d: len(heights(d)) > 1, timeout=15)
    shot(browser, "queue")

    fill(browser, {"#get-ackmode": "ack_requeue_true", "#get-encoding": "auto", "#get-count": "1"})
    css(browser, "#get-form button[type=submit]").click()
    wait(browser, lambda d: css(d, "#get-results pre.payload").text == "hello from the console")
    assert "x-origin" in css(browser, "#get-results").text
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 1  # requeued

    css(browser, "#purge-button").click()
    confirm(browser)
    wait(browser, lambda d: css(d, "#queue-ready dd").text == "0")
    css(browser, "#delete-button").click()
    confirm(browser)
    wait(browser, lambda d: d.current_url.endswith("#/queues"))
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.get(f"/api/queues/%2F/{q}").status_code == 404


def test_admin_creates_a_user_with_permissions(browser, broker):
    base = broker.http_url
    name = unique("console-user")
    login(browser, base)
    go(browser, base, "admin")
    fill(browser, {"#user-name": name, "#user-password": "secret", "#user-tags": "management"})
    css(browser, "#add-user-form button[type=submit]").click()
    wait(browser, lambda d: row(d, "users", name))
    fill(browser, {"#perm-user": name, "#perm-vhost": "/", "#perm-read": "^console-.*"})
    css(browser, "#set-permission-form button[type=submit]").click()
    wait(browser, lambda d: row(d, "permissions", f"{name}|/"))
    with httpx.Client(base_url=base, auth=(name, "secret"), timeout=5) as http:
        assert http.get("/api/whoami").json() == {"name": name, "tags": ["management"]}
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.get(f"/api/permissions/%2F/{name}").json()["read"] == "^console-.*"
        vhost = unique("console-vhost")
        assert http.put(f"/api/vhosts/{vhost}").status_code == 201
    fill(browser, {"#limit-vhost": vhost, "#limit-name": "max-queues", "#limit-value": "3"})
    css(browser, "#set-limit-form button[type=submit]").click()
    wait(browser, lambda d: '"max-queues":3' in row(d, "limits", vhost).text)
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.get(f"/api/vhost-limits/{vhost}").json() == [{"vhost": vhost, "value": {"max-queues": 3}}]


def test_admin_creates_a_policy_that_applies_to_queues(browser, broker):
    base = broker.http_url
    policy, q = unique("console-policy"), unique("console-capped")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    login(browser, base)
    go(browser, base, "admin")
    fill(browser, {"#policy-vhost": "/", "#policy-name": policy, "#policy-pattern": f"^{q}$",
                   "#policy-apply-to": "queues", "#policy-priority": "1", "#policy-definition": '{"max-length": 2}'})
    css(browser, "#add-policy-form button[type=submit]").click()
    wait(browser, lambda d: row(d, "policies", f"/|{policy}"))
    assert '"max-length":2' in row(browser, "policies", f"/|{policy}").text
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        shown = http.get(f"/api/queues/%2F/{q}").json()
        assert shown["policy"] == policy and shown["effective_policy_definition"] == {"max-length": 2}
    fill(browser, {"#policy-definition": '{"no-such-key": 1}', "#policy-name": unique("console-bad")})
    css(browser, "#add-policy-form button[type=submit]").click()  # RabbitMQ's 400 text shows by the form
    wait(browser, lambda d: "not recognised" in css(d, "#add-policy-form .error").text)


def test_monitoring_user_sees_no_message_contents(browser, broker):
    base = broker.http_url
    q, user = unique("console-secret"), unique("console-monitor")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "top secret"})
        http.put(f"/api/users/{user}", json={"password": "pw", "tags": "monitoring"})
        http.put(f"/api/permissions/%2F/{user}", json={"configure": ".*", "write": ".*", "read": ".*"})
    login(browser, base, user, "pw")
    go(browser, base, f"queue/%2F/{q}")
    wait(browser, lambda d: css(d, "#queue-ready dd").text == "1")
    assert css(browser, "#get-messages-denied").is_displayed()
    assert not browser.find_elements(By.CSS_SELECTOR, "#get-form")
    assert "top secret" not in browser.page_source
    with httpx.Client(base_url=base, auth=(user, "pw"), timeout=5) as http:  # and not through the API
        assert http.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_true"}).status_code == 401
    go(browser, base, "admin")
    wait(browser, lambda d: "needs the administrator tag" in css(d, "main").text)


def test_every_tab_renders_at_desktop_and_phone_width(browser, broker):
    base = broker.http_url
    login(browser, base)
    try:
        for width, label in ((1280, "desktop"), (390, "phone")):
            browser.set_window_size(width, 900)
            for tab in TABS:
                go(browser, base, tab)
                assert css(browser, f'#tabs a[data-tab="{tab}"]').get_attribute("aria-current") == "page"
                assert css(browser, "#banner").text == ""  # no API error on any tab
                # nothing wider than the window: the page never scrolls sideways as a whole
                assert browser.execute_script("return document.documentElement.scrollWidth") <= width + 1, tab
                shot(browser, f"{tab}-{label}")
                if tab == "overview" and label == "desktop":  # listeners come from the API
                    assert "amqp" in css(browser, "#listeners").text
        # every form control has a label
        go(browser, base, "admin")
        unlabelled = browser.execute_script(
            "return [...document.querySelectorAll('main input, main select, main textarea')]"
            ".filter(e => !e.labels || e.labels.length === 0).map(e => e.id)")
        assert unlabelled == []
    finally:
        browser.set_window_size(1280, 900)



def test_admin_sets_and_clears_a_user_limit(browser, broker):
    base = broker.http_url
    user = unique("console-limited")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        http.put(f"/api/users/{user}", json={"password": "pw", "tags": ""})
    login(browser, base)
    go(browser, base, "admin")
    fill(browser, {"#user-limit-user": user, "#user-limit-name": "max-connections", "#user-limit-value": "2"})
    css(browser, "#set-user-limit-form button[type=submit]").click()
    wait(browser, lambda d: row(d, "user-limits", f"{user}|max-connections")
         .find_element(By.CSS_SELECTOR, 'td[data-col="value"]').text == "2")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.get(f"/api/user-limits/{user}").json() == [{"user": user, "value": {"max-connections": 2}}]
    click(browser, lambda d: row(d, "user-limits", f"{user}|max-connections").find_element(By.TAG_NAME, "button"))
    confirm(browser)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#user-limits tr[data-key="{user}|max-connections"]'))
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert all(entry["user"] != user for entry in http.get("/api/user-limits").json())


def test_mirrors_tab_shows_a_mirrored_exchanges_log(browser, broker):
    """An exchange mirrored from the Mirrors tab, with retention, then published to: the tab shows
    its log's offsets and size as the mirror writer appends, and the retention set."""
    base = broker.http_url
    x = unique("console-mirrored")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout", "durable": True}).status_code == 201
    login(browser, base)
    go(browser, base, "mirrors")
    fill(browser, {"#mirror-vhost": "/", "#mirror-exchange": x, "#mirror-max-age": "3600000",
                   "#mirror-max-bytes": "5242880"})
    css(browser, "#mirror-exchange").send_keys(Keys.ENTER)
    wait(browser, lambda d: row(d, "mirrors", f"/|{x}"))
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        for i in range(5):
            r = http.post(f"/api/exchanges/%2F/{x}/publish", json={"routing_key": "", "payload": f"event {i} " * 20})
            assert r.status_code == 200
    Select(css(browser, "#refresh")).select_by_value("2000")
    cell = lambda d, col: row(d, "mirrors", f"/|{x}").find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text
    wait(browser, lambda d: cell(d, "next_offset") == "5")
    assert cell(browser, "first_offset") == "0" and int(cell(browser, "segments")) >= 1
    assert cell(browser, "bytes").endswith(("B", "KiB")) and cell(browser, "bytes") != "0 B"
    assert (cell(browser, "max_age_ms"), cell(browser, "max_bytes")) == ("3,600 s", "5.0 MiB")
    shot(browser, "mirrors-log")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        shown = next(m for m in http.get("/api/mirrors").json() if m["exchange"] == x)
        assert (shown["next_offset"], shown["max_age_ms"], shown["max_bytes"]) == (5, 3600000, 5242880)
        assert http.delete(f"/api/mirrors/%2F/{x}").status_code == 204


def test_connections_and_channels_show_traffic_rates(browser, broker):
    """A client's traffic as RabbitMQ's UI shows it: bytes per second from the client on the
    Connections tab, publishes per second on the Channels tab (rates from the broker's samples,
    every 5 s: the traffic goes on until they show it)."""
    base, label = broker.http_url, unique("console-traffic")
    params = pika.URLParameters(broker.url + "?heartbeat=0")
    params.client_properties = {"connection_name": label}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
            name = wait(browser, lambda _: next((c["name"] for c in http.get("/api/connections").json()
                                                 if c["user_provided_name"] == label and c["channels"] == 1), None))
            channel = http.get(f"/api/connections/{name}/channels").json()[0]["name"]
        login(browser, base)
        Select(css(browser, "#refresh")).select_by_value("2000")
        for tab, list_id, key, col in (("connections", "connections", name, "from_client"),
                                       ("channels", "channels", channel, "publish")):
            go(browser, base, tab)
            wait(browser, lambda d: row(d, list_id, key))
            cell = lambda d: row(d, list_id, key).find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text

            def busy(d: WebDriver) -> bool:  # traffic until the broker's next samples show its rate
                for _ in range(10):
                    ch.basic_publish("", label, b"x" * 100)  # routed nowhere: traffic all the same
                return cell(d) not in ("", "0 B/s", "0.0/s")
            wait(browser, busy, timeout=15)
            shot(browser, f"{tab}-traffic")
    finally:
        conn.close()


def test_charts_show_the_brokers_history_at_once_and_keep_it_across_tabs(browser, broker):
    """The charts draw the history the broker kept before the page was opened (RabbitMQ's samples,
    asked with the range's ``*_age``/``*_incr``): full on the first render, the same after a tab
    change, and on the range chosen."""
    base, q = broker.http_url, unique("console-history")
    path = f"/api/queues/%2F/{q}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        http.put(path, json={"durable": False})
        for i in range(20):
            http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": str(i),
                                                                      "properties": {}})
        ages = {"lengths_age": 600, "lengths_incr": 5}
        wait(browser, lambda _: [s["sample"] for s in http.get(path, params=ages).json()
                                 ["messages_ready_details"]["samples"][::120]] == [20, 0], timeout=15)
    login(browser, base)
    ready = 'polyline[data-series="messages_ready"]'

    def drawn(d: WebDriver) -> tuple[int, set[str]]:
        line = css(d, ready)
        return int(line.get_attribute("data-points")), {p.split(",")[1] for p in line.get_attribute("points").split()}
    for _ in range(2):  # the first visit, then again after another tab
        go(browser, base, f"queue/%2F/{q}")
        points, heights = drawn(browser)
        assert points == 121 and len(heights) == 2  # ten minutes at 5 s, from 0 to 20 ready
        assert css(browser, ".chart-span").text == "last 10 min"
        go(browser, base, "overview")
        assert int(css(browser, 'polyline[data-series="publish"]').get_attribute("data-points")) == 120
    go(browser, base, f"queue/%2F/{q}")
    Select(browser.find_elements(By.CSS_SELECTOR, ".chart-range")[1]).select_by_visible_text("Last minute")
    wait(browser, lambda d: drawn(d)[0] == 13)
    shot(browser, "queue-history")
    Select(css(browser, ".chart-range")).select_by_visible_text("Last ten minutes")  # as the other tests expect
    wait(browser, lambda d: drawn(d)[0] == 121)


def kv_value(driver: WebDriver, label: str) -> str:
    return driver.find_element(By.XPATH, f"//dt[text()='{label}']/following-sibling::dd[1]").text


def test_stream_page_has_no_get_or_purge_and_a_failed_button_says_why(browser, broker):
    base, s, q = broker.http_url, unique("console-stream"), unique("console-gone")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.put(f"/api/queues/%2F/{s}", json={"durable": True,
                                                       "arguments": {"x-queue-type": "stream"}}).status_code == 201
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        login(browser, base)
        go(browser, base, f"queue/%2F/{s}")
        wait(browser, lambda d: kv_value(d, "Type") == "stream")
        assert not css(browser, "#purge-button").is_displayed()  # RabbitMQ refuses both on a stream
        assert not browser.find_elements(By.CSS_SELECTOR, "#get-form") or not css(browser, "#get-form").is_displayed()
        go(browser, base, f"queue/%2F/{q}")
        wait(browser, lambda d: css(d, "#purge-button").is_displayed() and css(d, "#get-form").is_displayed())
        http.delete(f"/api/queues/%2F/{q}")  # gone under the page: the purge fails, and says so
        css(browser, "#purge-button").click()
        confirm(browser)
        wait(browser, lambda d: "Failed:" in css(d, ".toast.error").text and q in css(d, ".toast.error").text)
        http.delete(f"/api/queues/%2F/{s}")


def test_bind_form_sends_arguments_and_the_queue_page_shows_the_effective_policy(browser, broker):
    base, q, p = broker.http_url, unique("console-args"), unique("console-policy")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        assert http.put(f"/api/policies/%2F/{p}", json={"pattern": f"^{q}$", "definition": {"max-length": 7},
                                                        "apply-to": "queues"}).status_code in (201, 204)
        login(browser, base)
        go(browser, base, f"queue/%2F/{q}")
        wait(browser, lambda d: kv_value(d, "Policy") == p)
        assert kv_value(browser, "Effective policy definition") == '{"max-length":7}'
        fill(browser, {"#bind-other": "amq.direct", "#bind-key": q, "#bind-args": '{"x-origin": "console"}'})
        css(browser, "#bind-key").send_keys(Keys.ENTER)
        wait(browser, lambda d: row(d, "bindings", f"amq.direct|{q}|{q}"))
        bound = [b for b in http.get(f"/api/queues/%2F/{q}/bindings").json() if b["source"] == "amq.direct"]
        assert [b["arguments"] for b in bound] == [{"x-origin": "console"}]
        assert '{"x-origin":"console"}' in row(browser, "bindings", f"amq.direct|{q}|{q}").text
        fill(browser, {"#bind-other": "amq.direct", "#bind-key": "k2", "#bind-args": "not json"})
        css(browser, "#bind-key").send_keys(Keys.ENTER)
        wait(browser, lambda d: "Arguments must be a JSON object" in d.find_element(
            By.XPATH, "//*[@id='bind-args']/ancestor::form//p[@role='alert']").text)
        http.delete(f"/api/policies/%2F/{p}")
        http.delete(f"/api/queues/%2F/{q}")


def test_connection_and_channel_pages_show_the_client_and_its_channels(browser, broker):
    base, label, q = broker.http_url, unique("console-client"), unique("console-consumed")
    params = pika.URLParameters(broker.url + "?heartbeat=0")
    params.client_properties = {"connection_name": label}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(q, auto_delete=True)
        ch.basic_qos(prefetch_count=7)
        tag = ch.basic_consume(q, lambda *a: None)
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
            name = wait(browser, lambda _: next((c["name"] for c in http.get("/api/connections").json()
                                                 if c["user_provided_name"] == label), None))
        login(browser, base)
        go(browser, base, "connections")
        click(browser, lambda d: row(d, "connections", name).find_element(By.LINK_TEXT, name))
        wait(browser, lambda d: kv_value(d, "Client-provided name") == label)
        assert '"connection_name": "' + label + '"' in css(browser, "#client-properties").text
        assert "pika" in kv_value(browser, "Client").lower()
        assert css(browser, 'polyline[data-series="recv_oct"]')  # its traffic, charted from the history
        channel = f"{name} (1)"
        wait(browser, lambda d: row(d, "connection-channels", channel))
        click(browser, lambda d: row(d, "connection-channels", channel).find_element(By.TAG_NAME, "a"))
        wait(browser, lambda d: kv_value(d, "Prefetch") == "7")
        wait(browser, lambda d: row(d, "channel-consumers", tag))
        assert q in row(browser, "channel-consumers", tag).text
        assert kv_value(browser, "Connection") == name
        shot(browser, "channel")
    finally:
        conn.close()


def test_streams_tab_shows_super_streams_and_each_groups_partitions(browser, broker):
    """A super stream read by a consumer group of one pika member: the tab lists the super stream
    with its partitions, and one row per partition with the active member, committed offset and lag."""
    base, name, group = broker.http_url, unique("console-ss"), unique("console-grp")
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=5) as http:
        assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2}).status_code == 201
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for key in ("0", "0", "0", "1"):
            ch.basic_publish(name, key, b"m")
        ch.basic_qos(prefetch_count=10)
        got: list[int] = []
        args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first",
                "x-super-stream": name}
        for i in range(2):
            ch.basic_consume(f"{name}-{i}", lambda c, m, p, b: (got.append(1), c.basic_ack(m.delivery_tag)),
                             arguments=args, consumer_tag=f"member-{i}")
        while len(got) < 4:
            conn.process_data_events(time_limit=0.05)
        login(browser, base)
        Select(css(browser, "#refresh")).select_by_value("2000")
        go(browser, base, "streams")
        cell = lambda d, key, col: row(d, "stream-groups", key).find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text
        key0 = f"/|{name}|{group}|{name}-0"
        wait(browser, lambda d: cell(d, key0, "committed_offset") == "2")
        active = row(browser, "stream-groups", key0).find_element(By.CSS_SELECTOR, 'td[data-col="active"] span')
        assert active.text == "member-0" and active.get_attribute("title").startswith("channel ")
        assert (cell(browser, key0, "lag"), cell(browser, key0, "waiting")) == ("0", "0")
        ss = row(browser, "super-streams", f"/|{name}")
        assert ss.find_element(By.CSS_SELECTOR, 'td[data-col="partition_count"]').text == "2"
        assert ss.find_element(By.CSS_SELECTOR, 'td[data-col="groups"]').text == group
        shot(browser, "streams-groups")
    finally:
        conn.close()
