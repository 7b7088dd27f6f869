"""The settings' groups: every flat name (env, TOML, flags) lands in its group, the nested forms work
too, the precedence is flags > env > TOML > defaults whatever the form, and a removed setting is
refused by name."""

from __future__ import annotations

import pytest

from headrace.server.config import GROUPS, REMOVED, Settings, SettingsError, load_settings, unknown_env

GROUP_NAMES = ("network", "http", "storage", "spark", "limits", "auth", "cluster", "compat")


@pytest.fixture(autouse=True)
def _no_headrace_env(monkeypatch):
    import os
    for name in list(os.environ):
        if name.upper().startswith("HEADRACE_"):
            monkeypatch.delenv(name)


def test_every_setting_has_one_group_and_the_count_is_what_it_was_less_the_removed():
    assert set(GROUPS.values()) <= set(GROUP_NAMES)
    top = [name for name in Settings.model_fields if name not in GROUP_NAMES]
    assert sorted(top) == ["log_level", "shutdown_grace"]
    # the flat model's 62, the 8 of the cluster group, the rate history's 2, rabbitmq_compat,
    # stream_handover_timeout_ms, the tier's 2, checkpoint_min_bytes and delayed_read_bytes added since
    assert len(GROUPS) + len(top) + len(REMOVED) == 62 + 8 + 2 + 1 + 1 + 2 + 1 + 1
    assert sorted(name for name, group in GROUPS.items() if group == "cluster") == [
        "cluster_etcd_endpoints", "cluster_host", "cluster_id", "cluster_lag_timeout_s", "cluster_lease_ttl_s",
        "cluster_min_in_sync", "cluster_port", "node_name"]
    assert not set(REMOVED) & set(GROUPS)
    s = Settings()
    for name, group in GROUPS.items():
        assert hasattr(getattr(s, group), name)


def test_flat_env_names_set_the_grouped_fields(monkeypatch):
    monkeypatch.setenv("HEADRACE_AMQP_PORT", "5673")
    monkeypatch.setenv("HEADRACE_FSYNC", "off")
    monkeypatch.setenv("HEADRACE_MAX_CONNECTIONS", "5")
    monkeypatch.setenv("HEADRACE_HTTP_PORT", "15673")
    monkeypatch.setenv("HEADRACE_MIRROR_SYNC_INTERVAL", "0")
    monkeypatch.setenv("HEADRACE_LOOPBACK_USERS", '["a", "b"]')  # a list, as JSON, as before
    monkeypatch.setenv("headrace_metrics", "aggregate")  # names were never case-sensitive
    s = Settings()
    assert (s.network.amqp_port, s.storage.fsync, s.limits.max_connections) == (5673, "off", 5)
    assert (s.http.http_port, s.spark.mirror_sync_interval, s.auth.loopback_users) == (15673, 0, ["a", "b"])
    assert s.http.metrics == "aggregate"


def test_nested_env_names_and_the_nested_one_wins_over_the_flat(monkeypatch):
    monkeypatch.setenv("HEADRACE_STORAGE__SEGMENT_MAX_BYTES", "65536")
    monkeypatch.setenv("HEADRACE_NETWORK__AMQP_PORT", "6000")
    monkeypatch.setenv("HEADRACE_AMQP_PORT", "7000")
    s = Settings()
    assert (s.storage.segment_max_bytes, s.network.amqp_port) == (65536, 6000)


def test_toml_flat_keys_and_tables(tmp_path):
    toml = tmp_path / "headrace.toml"
    toml.write_text('amqp_port = 6000\nlog_level = "debug"\n[storage]\nfsync = "always"\n[limits]\nmax_tx_bytes = 4096\n')
    s = load_settings(toml)
    assert (s.network.amqp_port, s.log_level, s.storage.fsync, s.limits.max_tx_bytes) == (6000, "debug", "always", 4096)


def test_precedence_flags_env_toml_defaults_across_forms(tmp_path, monkeypatch):
    toml = tmp_path / "headrace.toml"
    toml.write_text('[network]\namqp_port = 6000\nheartbeat = 30\nchannel_max = 9\n[http]\nhttp_port = 6001\n')
    monkeypatch.setenv("HEADRACE_HTTP_PORT", "7001")  # flat env over the file's table
    monkeypatch.setenv("HEADRACE_NETWORK__HEARTBEAT", "20")
    s = load_settings(toml, amqp_port=None, heartbeat=10, fsync="off")  # as the CLI passes its flags
    assert s.network.amqp_port == 6000  # from the file (an absent flag is None)
    assert s.http.http_port == 7001  # env beats the file
    assert s.network.heartbeat == 10  # a flag beats everything
    assert s.network.channel_max == 9 and s.storage.fsync == "off"
    assert s.network.frame_max == 131072  # untouched: the default


def test_removed_settings_are_refused_by_name_everywhere(tmp_path, monkeypatch):
    assert set(REMOVED) == {"amqp_rcvbuf_max", "amqp_held_rcvbuf"}
    with pytest.raises(SettingsError, match=r"amqp_held_rcvbuf \(HEADRACE_AMQP_HELD_RCVBUF\) in a flag"):
        Settings(amqp_held_rcvbuf=8192)
    toml = tmp_path / "headrace.toml"
    toml.write_text("amqp_held_rcvbuf = 8192\n")
    with pytest.raises(SettingsError, match="amqp_held_rcvbuf .* in the config file .* is no longer a setting"):
        load_settings(toml)
    monkeypatch.setenv("HEADRACE_AMQP_RCVBUF_MAX", "8192")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "HEADRACE_AMQP_RCVBUF_MAX" in str(err.value) and "in the environment" in str(err.value)
    assert "\n" not in str(err.value)


def test_errors_are_one_line_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADRACE_AMQP_PORT", "70000")
    with pytest.raises(SettingsError) as err:
        load_settings(saturation_ready=10, saturation_resume_ready=10, bogus=1)
    text = str(err.value)
    assert "\n" not in text
    assert "amqp_port (HEADRACE_AMQP_PORT): Input should be less than or equal to 65535, got '70000'" in text
    assert "bogus: not a setting" in text
    monkeypatch.delenv("HEADRACE_AMQP_PORT")
    with pytest.raises(SettingsError, match="saturation_resume_ready .10. must be below saturation_ready .10."):
        load_settings(saturation_ready=10, saturation_resume_ready=10)
    toml = tmp_path / "headrace.toml"
    toml.write_text("[network]\nnot_a_knob = 1\n")
    with pytest.raises(SettingsError, match="network.not_a_knob: not a setting"):
        load_settings(toml)


def test_a_setting_given_flat_and_nested_in_one_file_must_agree(tmp_path):
    toml = tmp_path / "headrace.toml"
    toml.write_text("amqp_port = 6000\n[network]\namqp_port = 6001\n")
    with pytest.raises(SettingsError, match="amqp_port is given twice"):
        load_settings(toml)
    toml.write_text("amqp_port = 6000\n[network]\namqp_port = 6000\n")
    assert load_settings(toml).network.amqp_port == 6000


def test_unrelated_headrace_variables_are_not_settings(monkeypatch):
    monkeypatch.setenv("HEADRACE_URL", "http://elsewhere")  # the CLI client's, not the broker's
    monkeypatch.setenv("HEADRACE_FUZZ_EXAMPLES", "10")
    assert Settings().network.amqp_port == 5672


def test_unknown_env_names_only_what_nothing_reads():
    env = {"HEADRACE_AMQP_PROT": "1", "HEADRACE_AMQP_PORT": "1", "HEADRACE_NETWORK__HEARTBEAT": "1",
           "HEADRACE_URL": "u", "HEADRACE_VHOST": "/", "HEADRACE_CLI_CONFIG": "c", "HEADRACE_CONFIG": "c",
           "HEADRACE_NETWORK__BOGUS": "1", "PATH": "/bin"}
    assert unknown_env(env) == ["HEADRACE_AMQP_PROT", "HEADRACE_NETWORK__BOGUS"]


def test_a_bad_value_from_the_file_names_the_file_unless_the_environment_set_it(tmp_path, monkeypatch):
    toml = tmp_path / "headrace.toml"
    toml.write_text('channel_max = "many"\n')
    with pytest.raises(SettingsError, match=f"^{toml}: channel_max: Input should be a valid integer"):
        load_settings(toml)
    monkeypatch.setenv("HEADRACE_CHANNEL_MAX", "lots")  # the environment's value is the one refused
    with pytest.raises(SettingsError, match=r"^channel_max \(HEADRACE_CHANNEL_MAX\): .*got 'lots'"):
        load_settings(toml)


def test_the_rate_history_levels_are_checked(monkeypatch):
    monkeypatch.setenv("HEADRACE_STATS_RETENTION_BASIC", "[[30, 1], [300, 10]]")
    assert load_settings().http.stats_retention_basic == [(30, 1), (300, 10)]
    for bad, says in [("[[30, 0]]", "interval must be positive"), ("[[300, 10], [30, 1]]", "finest"),
                      ("[[30, 7]]", "not a multiple"), ("[]", "at least one")]:
        monkeypatch.setenv("HEADRACE_STATS_RETENTION_BASIC", bad)
        with pytest.raises(SettingsError, match=says):
            load_settings()


def test_rabbitmq_compat_chooses_the_message_size_default(monkeypatch):
    """max_message_size unset follows the release (3.10: 128 MiB; 4.x: 16 MiB); set, it wins."""
    assert load_settings().max_message_size == 128 * 1024 * 1024
    monkeypatch.setenv("HEADRACE_RABBITMQ_COMPAT", "4.2")
    assert load_settings().compat.rabbitmq_compat == "4.2"
    assert load_settings().max_message_size == 16 * 1024 * 1024
    assert load_settings(max_message_size=1000).max_message_size == 1000
    monkeypatch.setenv("HEADRACE_RABBITMQ_COMPAT", "5.0")
    with pytest.raises(SettingsError, match="rabbitmq_compat"):
        load_settings()
