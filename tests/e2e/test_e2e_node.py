"""The Node amqplib client, unmodified, against a real headrace process: node's own test runner
runs tests/node/*.test.mjs with the broker's AMQP and HTTP URLs. amqplib is installed from
tests/node's lock file (``npm ci``) the first time, as ``make test`` does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


@pytest.fixture(scope="module")
def node_client() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed for the amqplib tests"
    if not (NODE_DIR / "node_modules" / "amqplib" / "package.json").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=240,
                       capture_output=True)
    return Path(node)


@pytest.mark.parametrize("script", [
    "cancel_after_delete.test.mjs", "reply_to.test.mjs", "close_handshake.test.mjs"])
def test_amqplib(broker, node_client, script):
    result = subprocess.run(
        [str(node_client), "--test", "--test-reporter=spec", script], cwd=NODE_DIR, timeout=120,
        env={**os.environ, "AMQP_URL": broker.url, "HTTP_URL": broker.http_url}, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"^ℹ pass [1-9]", result.stdout, re.M) and re.search(r"^ℹ fail 0$", result.stdout, re.M), \
        result.stdout[-2000:]
