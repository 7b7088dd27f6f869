"""Client fixtures for the end-to-end tests, on the module's broker (tests/conftest.py), and a pair of
brokers of a test's own for the tests that link two (two_brokers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from two_brokers import free_port


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


@pytest.fixture
def broker_pair(broker_factory, tmp_path: Path) -> tuple[Any, Any]:
    """Two brokers, upstream (or source) and downstream (or destination), each on an AMQP port it
    keeps across a kill -9 and restart, so a link's URI and a client's stay valid."""
    up = broker_factory("--amqp-port", str(free_port()), data_dir=tmp_path / "up")
    down = broker_factory("--amqp-port", str(free_port()), data_dir=tmp_path / "down")
    return up, down
