"""A celery app for the end-to-end test; the broker URL and queue come from the environment."""

import os

from celery import Celery

app = Celery("headrace_e2e", broker=os.environ.get("E2E_BROKER_URL", "pyamqp://"), backend="rpc://")
app.conf.update(task_default_queue=os.environ.get("E2E_QUEUE", "celery"), broker_connection_retry_on_startup=True,
                result_expires=60, worker_prefetch_multiplier=4)


@app.task(name="e2e.add")
def add(x: int, y: int) -> int:
    return x + y
