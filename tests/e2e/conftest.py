"""Client fixtures for the end-to-end tests, on the module's broker (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pika
import pytest


@pytest.fixture
def conn(broker) -> Iterator[pika.BlockingConnection]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield connection
    if connection.is_open:
        connection.close()


@pytest.fixture
def ch(conn):
    return conn.channel()


@pytest.fixture
def http(broker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as client:
        yield client


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """One headless Debian Chromium for the whole session, driven through Debian's chromedriver
    (both installed by ``make browser``); paths are given so Selenium never downloads a driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # JavaScript errors, for the tests
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(15)
    driver.set_script_timeout(10)
    yield driver
    driver.quit()
