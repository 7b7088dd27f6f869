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
