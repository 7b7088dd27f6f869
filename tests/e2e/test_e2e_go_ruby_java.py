"""The Go, Ruby and Java clients, unmodified, against a real headrace process: Debian's amqp091-go
(``golang-github-rabbitmq-amqp091-go-dev``, built with Debian's Go), Bunny (``ruby-bunny``) and
RabbitMQ's Java client (``librabbitmq-client-java``, run by the JDK's source launcher), which
``make test`` installs. Each client runs one program (tests/go/client_check.go,
tests/ruby/client_check.rb, tests/java/ClientCheck.java) through topology with an exchange-to-exchange binding, confirmed
persistent publishes with every property and typed headers, a mandatory return, prefetch with a
requeueing nack, a channel-level 404, basic.get and a transaction, the consumer cancel notification
of a deleted queue, and a close from the management API. The programs pass against RabbitMQ 3.10
as well: what they expect is RabbitMQ's behaviour."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).resolve().parents[1]
GO_PACKAGES = "/usr/share/gocode"  # Debian's Go libraries, GOPATH layout
JAVA_CLASSPATH = "/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar"  # Debian's jars


def run_check(command: list[str], broker, **env: str) -> None:
    result = subprocess.run(command, timeout=60, capture_output=True, text=True,
                            env={**os.environ, "AMQP_URL": broker.url, "HTTP_URL": broker.http_url, **env})
    steps = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert result.returncode == 0 and result.stdout.rstrip().endswith("\nOK"), \
        result.stdout[-3000:] + result.stderr[-2000:]
    assert len(steps) == 8, steps  # every step ran


def test_go_amqp091_client(broker, tmp_path):
    go = shutil.which("go")
    assert go and Path(GO_PACKAGES, "src/github.com/rabbitmq/amqp091-go").is_dir(), \
        "Go and amqp091-go are needed (make test installs golang-go and golang-github-rabbitmq-amqp091-go-dev)"
    binary = tmp_path / "client_check"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": GO_PACKAGES, "GOCACHE": str(tmp_path / "gocache"),
           "HOME": str(tmp_path)}
    subprocess.run([go, "build", "-o", str(binary), str(TESTS / "go" / "client_check.go")], env=env, check=True,
                   timeout=120, capture_output=True)
    run_check([str(binary)], broker)


def test_ruby_bunny_client(broker):
    ruby = shutil.which("ruby")
    assert ruby, "Ruby and Bunny are needed (make test installs ruby-bunny)"
    run_check([ruby, str(TESTS / "ruby" / "client_check.rb")], broker)


def test_java_amqp_client(broker):
    java = shutil.which("java")
    assert java and Path(JAVA_CLASSPATH.split(":")[0]).exists(), \
        "a JDK and the Java client are needed (make test installs librabbitmq-client-java)"
    run_check([java, "-cp", JAVA_CLASSPATH, str(TESTS / "java" / "ClientCheck.java")], broker)
