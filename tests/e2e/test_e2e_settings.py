"""Settings as a deployment gives them to a real broker: flat and nested names in the environment and
in the TOML file, with the environment over the file whatever the form; and what the broker says
about a bad or removed setting: one line naming it, exit code 1, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys

import pika

SERVE_TIMEOUT = 20


def _serve(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--data-dir", str(tmp_path / "data"),
         "--amqp-port", "0", "--http-port", "0"],
        capture_output=True, text=True, timeout=SERVE_TIMEOUT, env={**os.environ, **env})


def test_flat_and_nested_names_reach_the_broker_with_env_over_file(broker_factory, tmp_path):
    config = tmp_path / "headrace.toml"
    config.write_text("frame_max = 32768\n\n[network]\nheartbeat = 5\nchannel_max = 9\n")
    env = {"HEADRACE_CHANNEL_MAX": "7",  # the flat variable over the file's [network] table
           "HEADRACE_NETWORK__FRAME_MAX": "65536"}  # the nested variable over the file's flat key
    proc = broker_factory("--config", str(config), env=env)
    offered: list[int] = []

    def heartbeat(_conn: object, server_value: int) -> int:
        offered.append(server_value)
        return server_value

    params = pika.URLParameters(proc.url)
    params.heartbeat = heartbeat
    with pika.BlockingConnection(params) as conn:
        tuned = conn._impl.params
        assert (tuned.channel_max, tuned.frame_max, offered) == (7, 65536, [5])
        ch = conn.channel()
        ch.queue_declare("configured")
        ch.basic_publish("", "configured", b"x" * 100_000)  # several 64 KiB frames
        assert ch.basic_get("configured", auto_ack=True)[2] == b"x" * 100_000


def test_a_removed_setting_is_refused_by_name_in_one_line(tmp_path):
    result = _serve(tmp_path, {"HEADRACE_AMQP_RCVBUF_MAX": "8192"})

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "HEADRACE_AMQP_RCVBUF_MAX" in lines[0] and "no longer a setting" in lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_a_bad_value_is_one_line_naming_the_variable(tmp_path):
    result = _serve(tmp_path, {"HEADRACE_FRAME_MAX": "100", "HEADRACE_NETWORK__HEARTBEAT": "-1"})

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "frame_max (HEADRACE_FRAME_MAX): Input should be greater than or equal to 4096" in lines[0]
    assert "heartbeat (HEADRACE_HEARTBEAT): Input should be greater than or equal to 0" in lines[0]
    assert not (tmp_path / "data").exists()


def test_a_bad_value_in_the_toml_file_names_the_file_and_the_key(tmp_path):
    config = tmp_path / "headrace.toml"
    config.write_text('heartbeat = "abc"\n')
    result = _serve(tmp_path, {"HEADRACE_CONFIG": str(config)})
    assert result.returncode == 1
    assert result.stderr.strip().startswith(f"Error: invalid settings: {config}: heartbeat: Input should be a valid "
                                            "integer"), result.stderr
    assert "\n" not in result.stderr.strip()
    config.write_text("[network]\nnot_a_knob = 1\n")
    result = _serve(tmp_path, {"HEADRACE_CONFIG": str(config)})
    assert result.returncode == 1
    assert result.stderr.strip() == f"Error: invalid settings: {config}: network.not_a_knob: not a setting"


def test_an_unknown_headrace_variable_is_warned_about_at_start(broker_factory):
    env = {"HEADRACE_AMQP_PROT": "5673",  # a typo, ignored otherwise
           "HEADRACE_URL": "http://127.0.0.1:1", "HEADRACE_USER": "x", "HEADRACE_CLI_CONFIG": "/nowhere"}  # the CLI's
    proc = broker_factory(env=env)
    warnings = [line.strip() for line in proc.log.splitlines() if line.startswith("Warning:")]
    assert warnings == ["Warning: HEADRACE_AMQP_PROT is not a headrace setting or variable; ignored"]
