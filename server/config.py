"""Every setting of a running broker: one pydantic-settings model of groups (config_groups.py).

Owner: this module owns where a value comes from and which group a flat name belongs to.
Precedence, highest first: CLI flags (passed as init values), ``HEADRACE_*`` environment variables,
the TOML file named by ``--config`` / ``HEADRACE_CONFIG``, then the defaults (RabbitMQ's where one
exists).

Why flat names still work: the settings were one flat model until they were grouped, and every
deployment, test and document names them flat (``HEADRACE_AMQP_PORT``, ``amqp_port = 5673``,
``--amqp-port``). Each source's flat names are moved into their group (``GROUPS``) before the
sources are merged, so a flat name and its nested form (``HEADRACE_NETWORK__AMQP_PORT``, a
``[network]`` table) are one setting with one precedence. A removed setting is refused by name
(``REMOVED``), also in the environment, where pydantic-settings would ignore an unknown name.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic.fields import FieldInfo

from .config_groups import (
    AuthSettings,
    ClusterSettings,
    CompatSettings,
    HttpSettings,
    LimitsSettings,
    NetworkSettings,
    SparkSettings,
    StorageSettings,
)

__all__ = ["GROUPS", "OTHER_ENV", "REMOVED", "Settings", "SettingsError", "load_settings", "unknown_env"]

ENV_PREFIX = "HEADRACE_"

# A removed setting's flat name -> why it went and where its value lives now (benchmarks/RESULTS.md).
REMOVED: dict[str, str] = {
    "amqp_rcvbuf_max": "a connection's window grows up to 4 MiB and net.core.rmem_max (measured: a fixed "
                       "window halved bulk publishers and did not lower latency)",
    "amqp_held_rcvbuf": "a held connection's receive buffer is never shrunk (measured: the shrink drops data "
                        "in flight and leaves clients with larger send buffers)",
}

# HEADRACE_* variables that are not broker settings but are read by other parts: the config file's
# name, the management CLI's client (cli/client.py), the pure-Python switch of persistence/mirror_frame.py
# and the test suite's fuzz size. ``unknown_env`` warns about any other.
OTHER_ENV = frozenset({"HEADRACE_CONFIG", "HEADRACE_CONFIG_FILE_INTERNAL", "HEADRACE_URL", "HEADRACE_USER",
                       "HEADRACE_PASSWORD", "HEADRACE_VHOST", "HEADRACE_CLI_CONFIG", "HEADRACE_PURE_PYTHON",
                       "HEADRACE_FUZZ_EXAMPLES"})


class SettingsError(ValueError):
    """A configuration the broker refuses, told in one line (the CLI prints it as it is)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid",
                                      validate_default=True)

    network: NetworkSettings = Field(default_factory=lambda: NetworkSettings.model_validate({}))
    http: HttpSettings = Field(default_factory=lambda: HttpSettings.model_validate({}))
    storage: StorageSettings = Field(default_factory=lambda: StorageSettings.model_validate({}))
    spark: SparkSettings = Field(default_factory=lambda: SparkSettings.model_validate({}))
    limits: LimitsSettings = Field(default_factory=lambda: LimitsSettings.model_validate({}))
    auth: AuthSettings = Field(default_factory=lambda: AuthSettings.model_validate({}))
    cluster: ClusterSettings = Field(default_factory=lambda: ClusterSettings.model_validate({}))
    compat: CompatSettings = Field(default_factory=lambda: CompatSettings.model_validate({}))
    # the process as a whole
    shutdown_grace: float = Field(5.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @property
    def max_message_size(self) -> int:
        """The largest message body accepted: the setting, else the compat release's default
        (RabbitMQ 4.0 lowered it from 128 MiB to 16 MiB)."""
        size = self.limits.max_message_size
        if size is not None:
            return size
        return 128 * 1024 * 1024 if self.compat.rabbitmq_compat == "3.10" else 16 * 1024 * 1024

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # the nested environment names (HEADRACE_NETWORK__AMQP_PORT) before the flat ones: the
        # more specific name wins when both are set
        sources: list[PydanticBaseSettingsSource] = [
            _Grouped(settings_cls, init_settings, "a flag or argument"), env_settings,
            _Grouped(settings_cls, EnvSettingsSource(_flat_env_model()), "the environment")]
        toml_path = os.environ.get("HEADRACE_CONFIG_FILE_INTERNAL")
        if toml_path:
            sources.append(_Grouped(settings_cls, TomlConfigSettingsSource(settings_cls, toml_file=toml_path),
                                    f"the config file {toml_path}"))
        return tuple(sources)


def _groups() -> dict[str, str]:
    groups: dict[str, str] = {}
    for group, info in Settings.model_fields.items():
        model = info.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            groups.update({name: group for name in model.model_fields})
    return groups


# flat name -> its group (amqp_port -> network)
GROUPS: dict[str, str] = _groups()


class _Grouped(PydanticBaseSettingsSource):
    """One source (flags, environment, TOML) with its flat names moved into their groups."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource, where: str) -> None:
        super().__init__(settings_cls)
        self._inner = inner
        self._where = where

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the inner source whole

    def __call__(self) -> dict[str, Any]:
        return group_flat(self._inner(), self._where)


def group_flat(values: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"amqp_port": 1, "storage": {...}}`` -> ``{"network": {"amqp_port": 1}, "storage": {...}}``;
    a removed name is refused, any other unknown name is left for the model to refuse."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in GROUPS:
            continue
        if key in REMOVED:
            raise SettingsError(f"{key} (HEADRACE_{key.upper()}) in {where} is no longer a setting: {REMOVED[key]}")
        out[key] = dict(value) if isinstance(value, dict) else value
    for key, value in values.items():
        group = GROUPS.get(key)
        if group is None:
            continue
        table = out.setdefault(group, {})
        if not isinstance(table, dict):
            continue  # "network = 5": the model refuses it
        if key in table and table[key] != value:
            raise SettingsError(f"{key} is given twice in {where}, as {key} and as {group}.{key}")
        table[key] = value
    return out


@functools.cache
def _flat_env_model() -> type[BaseSettings]:
    """A model with one field per flat name (and removed name), only so that pydantic-settings reads
    and decodes ``HEADRACE_<NAME>`` exactly as it did for the flat model (JSON for lists)."""
    fields: dict[str, Any] = {name: (Any, None) for name in REMOVED}
    for info in Settings.model_fields.values():
        group = info.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            fields.update({name: (f.annotation, None) for name, f in group.model_fields.items()})
    flat: type[BaseSettings] = create_model("FlatEnv", __base__=BaseSettings, **fields)
    flat.model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")
    return flat


def unknown_env(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The ``HEADRACE_*`` names in ``environ`` that nothing reads (a typo such as
    ``HEADRACE_AMQP_PROT``): pydantic-settings ignores them silently, so ``headrace serve`` warns."""
    known = set(OTHER_ENV) | {ENV_PREFIX + name.upper() for name in (*GROUPS, *REMOVED, *Settings.model_fields)}
    known |= {f"{ENV_PREFIX}{group.upper()}__{name.upper()}" for name, group in GROUPS.items()}
    return sorted(name for name in environ if name.upper().startswith(ENV_PREFIX) and name.upper() not in known)


def _in_env(loc: tuple[str, ...]) -> bool:
    """Whether a setting at ``loc`` (``("network", "amqp_port")``) came from the environment."""
    names = {ENV_PREFIX + "__".join(loc).upper(), ENV_PREFIX + loc[-1].upper()}
    return any(name in os.environ for name in names)


def _one_line(exc: ValidationError, path: Path | None = None, flags: frozenset[str] = frozenset()) -> str:
    """A pydantic error list as one line that names each setting as it is set (its flat name and
    environment variable, or the TOML file and the key), not by pydantic's location in the groups."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = tuple(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        setting = (loc[1] if len(loc) == 2 and GROUPS.get(loc[1]) == loc[0] else
                   loc[0] if len(loc) == 1 and loc[0] in Settings.model_fields and loc[0] not in GROUPS.values()
                   else None)
        from_file = path is not None and bool(loc) and not _in_env(loc) and (setting or loc[-1]) not in flags
        if from_file and (setting is not None or err["type"] == "extra_forbidden"):
            what = "not a setting" if err["type"] == "extra_forbidden" else f"{msg}, got {err['input']!r}"
            parts.append(f"{path}: {setting or '.'.join(loc)}: {what}")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{'.'.join(loc)}: not a setting")
        elif setting is not None:
            parts.append(f"{setting} (HEADRACE_{setting.upper()}): {msg}, got {err['input']!r}")
        else:  # a group's own check, whose message names its settings, or an item of a list
            parts.append(f"{'.'.join(loc[1:]) + ': ' if len(loc) > 1 else ''}{msg}")
    return "; ".join(parts)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from a TOML file (optional), the environment and explicit overrides (flat names,
    as the CLI's flags give them); any error is a ``SettingsError`` of one line."""
    path = config_file or (Path(os.environ["HEADRACE_CONFIG"]) if os.environ.get("HEADRACE_CONFIG") else None)
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    clean = {k: v for k, v in overrides.items() if v is not None}
    old = os.environ.get("HEADRACE_CONFIG_FILE_INTERNAL")
    try:
        if path is not None:
            os.environ["HEADRACE_CONFIG_FILE_INTERNAL"] = str(path)
        return Settings(**clean)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc, path, frozenset(clean))) from None
    finally:
        if old is None:
            os.environ.pop("HEADRACE_CONFIG_FILE_INTERNAL", None)
        else:
            os.environ["HEADRACE_CONFIG_FILE_INTERNAL"] = old
