"""Put on PYTHONPATH of a broker started by a benchmark: the broker's trio loop then records how
much CPU time each task step and each turn of the run loop (the tasks run between two I/O polls)
take. CPU time, not wall time, so a loaded machine does not inflate it: the longest step is how
long one piece of broker work held the event loop. Garbage collections are timed apart (a full
collection runs inside whichever step allocated last), so the longest step without them shows
the work itself. SIGUSR2 writes the figures since the last
SIGUSR2 to ``$LOOP_STEPS_FILE`` as JSON and starts afresh."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time

import trio

_out = os.environ.get("LOOP_STEPS_FILE")


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self._t = 0.0
        self._gc_t = 0.0
        self._gc_in_step = 0.0
        self.reset()
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != threading.main_thread().ident:
            return  # a collection in a worker thread holds no task step
        if phase == "start":
            self._gc_t = time.thread_time()
        else:
            d = time.thread_time() - self._gc_t
            self._gc_in_step += d
            self.gc_max = max(self.gc_max, d)

    def reset(self) -> None:
        self.steps = 0
        self.step_max = 0.0
        self.step_max_task = ""
        self.over = {1: 0, 5: 0, 20: 0, 50: 0}  # steps longer than this many ms
        self.turn_max = 0.0
        self.gc_max = 0.0
        self.step_max_no_gc = 0.0
        self._turn = time.thread_time()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._gc_in_step = 0.0
        self._t = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        d = time.thread_time() - self._t  # (a dump inside the step resets the counts, not _t)
        self.steps += 1
        self.step_max_no_gc = max(self.step_max_no_gc, d - self._gc_in_step)
        if d > self.step_max:
            self.step_max, self.step_max_task = d, task.name
        for ms in self.over:
            if d * 1000 > ms:
                self.over[ms] += 1

    def before_io_wait(self, timeout: float) -> None:
        self.turn_max = max(self.turn_max, time.thread_time() - self._turn)

    def after_io_wait(self, timeout: float) -> None:
        self._turn = time.thread_time()

    def dump(self, *_: object) -> None:
        if _out:
            with open(_out, "w") as f:
                json.dump({"steps": self.steps, "step_max_ms": self.step_max * 1000, "step_max_task": self.step_max_task,
                           "steps_over_ms": self.over, "turn_max_ms": self.turn_max * 1000,
                           "step_max_without_gc_ms": self.step_max_no_gc * 1000, "gc_max_ms": self.gc_max * 1000}, f)
        self.reset()


if _out:
    _instrument = _Steps()
    _run = trio.run

    def _instrumented_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["instruments"] = [*kwargs.get("instruments", ()), _instrument]
        signal.signal(signal.SIGUSR2, _instrument.dump)
        return _run(*args, **kwargs)

    trio.run = _instrumented_run
