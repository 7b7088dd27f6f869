"""Runtime parameters, global parameters and virtual host / user limits, as RabbitMQ keeps them.

Owner: the ``Broker`` holds one ``RuntimeParameters`` (``broker.parameters``). The management API
and the definitions import change it; sessions and vhosts read limits from it when a connection,
channel or queue is about to be created. Every change calls ``on_change`` with the section and key
of what changed in the definitions document, so that entry alone is logged.

RabbitMQ stores a vhost's limits as the runtime parameter ``vhost-limits``/``limits`` of that
vhost; here they are kept apart (they are read on hot-ish paths) and shown under that name in the
parameter listings and the definitions, so an export loads into RabbitMQ and back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["USER_LIMITS", "VHOST_LIMITS", "RuntimeParameters"]

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")
VHOST_LIMITS_COMPONENT = "vhost-limits"
VHOST_LIMITS_NAME = "limits"


def _check_limit(name: str, value: Any, known: tuple[str, ...]) -> int:
    if name not in known:
        raise ValueError(f"unknown limit '{name}' (known: {', '.join(known)})")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"limit '{name}' must be an integer, got {value!r}")
    return value


@dataclass(slots=True)
class RuntimeParameters:
    parameters: dict[tuple[str, str, str], Any] = field(default_factory=dict)  # (component, vhost, name)
    global_parameters: dict[str, Any] = field(default_factory=dict)
    vhost_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    user_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    # (section, key) of a durable change: the broker's ``DefinitionChanges.changed``, required so
    # that a change is never dropped unlogged
    on_change: Callable[[str, tuple[str, ...]], None] = field(kw_only=True)

    # ------------------------------------------------------------------ parameters
    def set_parameter(self, component: str, vhost: str, name: str, value: Any) -> bool:
        """Store a vhost-scoped parameter; True if it existed. ``vhost-limits`` goes to the limits."""
        if not component or not name:
            raise ValueError("a parameter needs a component and a name")
        if component == VHOST_LIMITS_COMPONENT:
            if not isinstance(value, dict):
                raise ValueError("vhost-limits value must be an object of limits")
            existed = vhost in self.vhost_limits
            limits = {k: _check_limit(k, v, VHOST_LIMITS) for k, v in value.items()}
            self.vhost_limits[vhost] = limits
        else:
            existed = (component, vhost, name) in self.parameters
            self.parameters[(component, vhost, name)] = value
        self._parameter_changed(component, vhost, name)
        return existed

    def clear_parameter(self, component: str, vhost: str, name: str) -> bool:
        if component == VHOST_LIMITS_COMPONENT:
            existed = self.vhost_limits.pop(vhost, None) is not None
        else:
            existed = self.parameters.pop((component, vhost, name), None) is not None
        if existed:
            self._parameter_changed(component, vhost, name)
        return existed

    def _parameter_changed(self, component: str, vhost: str, name: str) -> None:
        if component == VHOST_LIMITS_COMPONENT:
            name = VHOST_LIMITS_NAME
        self.on_change("parameters", (vhost, component, name))

    def list_parameters(self, component: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
        """RabbitMQ's parameter objects (``vhost``, ``component``, ``name``, ``value``), vhost limits
        included as ``vhost-limits``/``limits``."""
        rows = [{"vhost": v, "component": c, "name": n, "value": value}
                for (c, v, n), value in sorted(self.parameters.items())]
        rows += [{"vhost": v, "component": VHOST_LIMITS_COMPONENT, "name": VHOST_LIMITS_NAME, "value": dict(limits)}
                 for v, limits in sorted(self.vhost_limits.items()) if limits]
        return [r for r in rows if (component is None or r["component"] == component)
                and (vhost is None or r["vhost"] == vhost)]

    def set_global(self, name: str, value: Any) -> bool:
        if not name:
            raise ValueError("a global parameter needs a name")
        existed = name in self.global_parameters
        self.global_parameters[name] = value
        self.on_change("global_parameters", (name,))
        return existed

    def clear_global(self, name: str) -> bool:
        existed = self.global_parameters.pop(name, None) is not None
        if existed:
            self.on_change("global_parameters", (name,))
        return existed

    # ------------------------------------------------------------------ limits
    def set_vhost_limit(self, vhost: str, name: str, value: Any) -> None:
        self.vhost_limits.setdefault(vhost, {})[name] = _check_limit(name, value, VHOST_LIMITS)
        self._parameter_changed(VHOST_LIMITS_COMPONENT, vhost, VHOST_LIMITS_NAME)

    def clear_vhost_limit(self, vhost: str, name: str) -> bool:
        limits = self.vhost_limits.get(vhost, {})
        existed = limits.pop(name, None) is not None
        if not limits:
            self.vhost_limits.pop(vhost, None)
        if existed:
            self._parameter_changed(VHOST_LIMITS_COMPONENT, vhost, VHOST_LIMITS_NAME)
        return existed

    def set_user_limit(self, user: str, name: str, value: Any) -> None:
        self.user_limits.setdefault(user, {})[name] = _check_limit(name, value, USER_LIMITS)
        self.on_change("users", (user,))  # a user's limits are part of its entry

    def clear_user_limit(self, user: str, name: str) -> bool:
        limits = self.user_limits.get(user, {})
        existed = limits.pop(name, None) is not None
        if not limits:
            self.user_limits.pop(user, None)
        if existed:
            self.on_change("users", (user,))
        return existed

    def vhost_limit(self, vhost: str, name: str) -> int | None:
        """The limit in force, or None; a negative value means no limit (as RabbitMQ's -1)."""
        value = self.vhost_limits.get(vhost, {}).get(name)
        return value if value is not None and value >= 0 else None

    def user_limit(self, user: str, name: str) -> int | None:
        value = self.user_limits.get(user, {}).get(name)
        return value if value is not None and value >= 0 else None

    # ------------------------------------------------------------------ lifecycle
    def vhost_deleted(self, vhost: str) -> None:
        self.vhost_limits.pop(vhost, None)
        for key in [k for k in self.parameters if k[1] == vhost]:
            del self.parameters[key]

    def user_deleted(self, user: str) -> None:
        self.user_limits.pop(user, None)
