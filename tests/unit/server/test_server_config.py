"""Settings precedence: CLI flags > HEADRACE_* environment > TOML file > defaults."""

from __future__ import annotations

import pytest

from headrace.server.config import Settings, load_settings


def test_defaults_match_rabbitmq_conventions():
    s = Settings()
    assert (s.network.amqp_host, s.network.amqp_port, s.http.http_port, s.auth.default_user, s.auth.default_vhost) == (
        "127.0.0.1", 5672, 15672, "guest", "/")
    assert s.auth.loopback_users == ["guest"] and s.storage.fsync == "batch"


def test_toml_env_and_flags_precedence(tmp_path, monkeypatch):
    toml = tmp_path / "headrace.toml"
    toml.write_text('amqp_port = 6000\nhttp_port = 6001\nheartbeat = 30\n')
    monkeypatch.setenv("HEADRACE_HTTP_PORT", "7001")
    s = load_settings(toml, amqp_port=None, heartbeat=10)
    assert s.network.amqp_port == 6000  # from the file
    assert s.http.http_port == 7001  # env beats the file
    assert s.network.heartbeat == 10  # a flag beats everything


def test_bad_values_are_refused(tmp_path):
    with pytest.raises(ValueError):
        Settings(amqp_port=70000)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")


def test_saturation_and_socket_bounds_are_checked():
    with pytest.raises(ValueError, match="saturation_resume_ready"):
        Settings(saturation_ready=100, saturation_resume_ready=100)
    with pytest.raises(ValueError, match="amqp_mss"):
        Settings(amqp_mss=40)
    assert Settings(amqp_mss=0, amqp_rcvbuf=0).network.amqp_mss == 0  # 0 = the kernel's own sizing
    # the window set on each connection after its handshake needs segments that fit in it (or it stalls)
    with pytest.raises(ValueError, match="amqp_rcvbuf .16384. needs amqp_mss between 88 and 16384"):
        Settings(amqp_mss=0)  # the route's segments (64 KiB on loopback) over the default window
    with pytest.raises(ValueError, match="amqp_rcvbuf"):
        Settings(amqp_rcvbuf=1024, amqp_mss=1448)
    with pytest.raises(ValueError, match="amqp_rcvbuf_long_link_rtt"):
        Settings(amqp_rcvbuf_long_link_rtt=-1)
    assert Settings(amqp_rcvbuf=8192, amqp_mss=1448).network.amqp_rcvbuf == 8192
    defaults = Settings()
    # small windows and segments from accept, growing for a connection no saturated queue holds
    assert (defaults.network.amqp_rcvbuf, defaults.network.amqp_mss) == (16384, 7300)
    assert defaults.network.amqp_rcvbuf_long_link_rtt == 0.002  # a LAN's round trip is well under it
    assert (defaults.network.saturation_ready, defaults.network.saturation_resume_ready) == (100, 30)


def test_cluster_settings_default_to_standalone(monkeypatch) -> None:
    s = load_settings()
    assert s.cluster.etcd_endpoints == [] and s.cluster.node_name == "headrace@localhost"
    monkeypatch.setenv("HEADRACE_CLUSTER_ETCD_ENDPOINTS", "http://127.0.0.1:2379, http://10.0.0.2:2379")
    monkeypatch.setenv("HEADRACE_NODE_NAME", "hr1@localhost")
    s = load_settings()
    assert s.cluster.etcd_endpoints == ["http://127.0.0.1:2379", "http://10.0.0.2:2379"] and s.cluster.node_name == "hr1@localhost"


def test_cluster_endpoints_must_be_urls() -> None:
    with pytest.raises(ValueError, match="'127.0.0.1:2379' is not an http"):
        load_settings(cluster_etcd_endpoints="127.0.0.1:2379")
