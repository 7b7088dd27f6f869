"""One long-lived thread for the flusher's fsyncs on a slow disk, with a hand-off of two system calls.

Owner: the ``Flusher`` owns its ``SyncThread``; one call runs at a time (the flusher's group lock).

Why not ``trio.to_thread.run_sync``: its hand-off (the thread cache, the thread's name set and
reset, the result carried back through trio's wake-up socket and a scheduler callback) cost about
280 us of CPU per confirmed message on a 2-core machine when every group went through it, against
about 150 us here. The call goes in through a ``SimpleQueue``; its end comes back as one byte on a
pipe that the calling task waits on like any socket.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["SyncThread"]

T = TypeVar("T")


class _Call(Generic[T]):
    __slots__ = ("fn", "result", "error")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None


class SyncThread:
    def __init__(self, name: str = "headrace-fsync") -> None:
        self._calls: queue.SimpleQueue[_Call[object] | None] = queue.SimpleQueue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._done_r = self._done_w = -1  # the pipe, made with the thread at the first call

    def _loop(self) -> None:
        calls = self._calls
        done = self._done_w
        while (call := calls.get()) is not None:
            try:
                call.result = call.fn()
            except BaseException as exc:  # noqa: BLE001 - carried back to the caller, raised there
                call.error = exc
            os.write(done, b"\x01")

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the thread; the calling task waits, shielded from cancellation: a call that
        started is seen through, so its result (a sync that did or did not happen) is never lost."""
        if self._thread is None:
            self._done_r, self._done_w = os.pipe()
            os.set_blocking(self._done_r, False)
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()
        call: _Call[T] = _Call(fn)
        self._calls.put(call)  # type: ignore[arg-type]
        with trio.CancelScope(shield=True):
            while True:
                await trio.lowlevel.wait_readable(self._done_r)
                try:
                    os.read(self._done_r, 1)
                    break
                except BlockingIOError:  # a spurious wake-up
                    continue
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    def close(self) -> None:
        """Ends the thread (after the call it may be running) and closes the pipe."""
        if self._thread is None:
            return
        self._calls.put(None)
        self._thread.join()
        self._thread = None
        for fd in (self._done_r, self._done_w):
            os.close(fd)
        self._done_r = self._done_w = -1
