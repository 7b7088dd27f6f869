"""Whether the per-message wire work runs in C: the ``_wire`` module (``_wire.c``) when the install
built it and ``HEADRACE_PURE_PYTHON=1`` is not set, the pure-Python twins otherwise.

Owned by no state: ``codec`` (``encode_deliver``), ``properties`` (``quick_props``),
``channel_frames`` (``scan_publishes``) and ``broker/publish_runs`` (``make_messages``,
``make_entries``) each read ``WIRE`` once, at import, and bind the function they hand out; the
tests hold the two implementations to the same events, objects and bytes.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["ACCELERATED", "WIRE"]


def _load() -> ModuleType | None:
    if os.environ.get("HEADRACE_PURE_PYTHON") == "1":
        return None
    try:  # built by `pip install` when a C compiler is there
        from . import _wire
    except ImportError:
        return None
    return _wire


WIRE = _load()
ACCELERATED = WIRE is not None
