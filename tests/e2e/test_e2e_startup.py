"""Starting a broker where it cannot run: a data directory another broker holds, a port in use.
Each must end at once with one line and exit code 1, before anything in the data directory is read."""

from __future__ import annotations

import socket
import subprocess
import sys

import pika

SERVE_TIMEOUT = 20


def _serve(data_dir, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, timeout=SERVE_TIMEOUT)


def test_second_broker_on_the_same_data_dir_exits_naming_the_holder(broker_factory, tmp_path):
    first = broker_factory()
    with pika.BlockingConnection(pika.URLParameters(first.url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("kept", durable=True)
        for i in range(100):
            ch.basic_publish("", "kept", str(i).encode(), pika.BasicProperties(delivery_mode=2))

    second = _serve(first.data_dir, "--amqp-port", "0", "--http-port", "0")

    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert str(first.data_dir.resolve()) in lines[0]
    assert f"pid {first.proc.pid}" in lines[0]
    assert (first.data_dir / "headrace.lock").read_text().strip() == str(first.proc.pid)
    # the first broker never noticed, and still has every message after a clean restart
    assert first.stop() == 0
    restarted = broker_factory(data_dir=first.data_dir)
    with pika.BlockingConnection(pika.URLParameters(restarted.url)) as conn:
        assert conn.channel().queue_declare("kept", durable=True, passive=True).method.message_count == 100


def test_lock_is_free_again_after_kill_9(broker_factory):
    first = broker_factory()
    first.kill()
    again = broker_factory(data_dir=first.data_dir)
    assert (first.data_dir / "headrace.lock").read_text().strip() == str(again.proc.pid)


def test_port_in_use_is_one_line_before_recovery(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for args in (["--amqp-port", str(port), "--http-port", "0"],
                     ["--amqp-port", "0", "--http-port", str(port)]):
            data_dir = tmp_path / f"data-{args[1]}"
            result = _serve(data_dir, *args)
            assert result.returncode == 1
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, result.stderr
            assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0]
            assert not (data_dir / "definitions.json").exists()  # recovery never ran


def test_damaged_definitions_file_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "definitions.json").write_text("{not json")

    started = _serve(tmp_path, "--amqp-port", "0", "--http-port", "0")

    assert started.returncode == 1
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1, started.stderr
    assert "definitions.json" in lines[0] and "not valid JSON" in lines[0]
    assert (tmp_path / "definitions.json").read_text() == "{not json"  # left as it was, for the operator
