"""What the synchronous core calls in the I/O shell: one object, given to ``Broker`` when it is built.

Owner: the shell builds the one ``ShellPorts`` (``server/app.py``; a unit test builds a stand-in of
the shell) and passes it to ``Broker(ports=...)``, which hands each port to the part that calls it.
Nothing sets a port later: a port missing at construction is a ``TypeError`` (and a mypy error),
where a callback installed after construction, with a do-nothing default, failed silently when a
caller forgot it (a flusher never woken, a clock that never learnt of an earlier deadline).

Each port is a plain callable, taken once by the part that calls it and called there directly, so
a wake on the message path costs what a stored callback did: one attribute load and a call. Every
port runs on the event loop and only notes or wakes; none awaits or calls back into the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headrace.queues import Destination

__all__ = ["ShellPorts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellPorts:
    # a deadline came before the earliest the clock knew (``Deadlines``), the first queue became
    # saturated so its ticks are due (``Saturation``), the firehose holds its first copy (``Firehose``):
    # the clock task (``Clock.wake``) looks again
    wake_clock: Callable[[], None]
    # the store outbox got its first op (``StoreOutbox.add``): the flusher (``Flusher.kick``)
    wake_flusher: Callable[[], None]
    # the mirror outbox got its first record (``MirrorOutbox.add``): the mirror writer
    wake_mirror_writer: Callable[[], None]
    # a stream's bounded dispatch left deliveries to make (``Settlement.on_stream_backlog``): the
    # stream pump (``StreamPump.wake``) continues them after every other runnable task
    wake_stream_pump: Callable[[], None]
    # a saturated queue was released (``Saturation``): the readers it held look again (``Gate.released``)
    saturation_released: Callable[[Destination], None]
    # a policy was set or cleared (``Broker.set_policy``/``clear_policy``): stream retention runs
    # with the new values now (``Flusher.retention_now``)
    policies_changed: Callable[[], None]
    # a user was deleted (after its AMQP connections were closed): the HTTP shell ends that user's
    # consume streams (``App.user_deleted`` -> the management API's ``HTTPServer.user_deleted``)
    user_deleted: Callable[[str], None]
