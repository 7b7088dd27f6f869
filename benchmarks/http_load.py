"""HTTP publish-batch load: NDJSON batches of N messages over keep-alive connections (headrace only:
RabbitMQ's management API publishes one message per request and has no batch endpoint)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx


def scenario_http_batch(base_url: str, *, messages: int = 100_000, batch: int = 1000, clients: int = 2,
                        size: int = 200, persistent: bool = False, timeout: float = 120,
                        auth: tuple[str, str] = ("guest", "guest")) -> dict[str, Any]:
    """Publish ``messages`` through publish-batch into one durable queue; rate = messages / wall time.
    Every response is checked: each line must say routed (and confirmed when persistent)."""
    qname = f"bench-http-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=base_url, auth=auth, timeout=timeout) as admin:
        admin.put(f"/api/queues/%2F/{qname}", json={"durable": True}).raise_for_status()
        props = {"delivery_mode": 2} if persistent else {}
        line = json.dumps({"routing_key": qname, "payload": "x" * size, "properties": props})
        body = "\n".join([line] * batch)
        per_client = messages // clients // batch
        failures: list[str] = []
        deadline = time.monotonic() + timeout

        def client() -> None:
            with httpx.Client(base_url=base_url, auth=auth, timeout=timeout) as c:
                for _ in range(per_client):
                    if time.monotonic() > deadline:
                        failures.append("timeout")
                        return
                    r = c.post("/api/exchanges/%2F/amq.default/publish-batch", content=body)
                    if r.status_code != 200:
                        failures.append(f"{r.status_code} {r.text[:100]}")
                        return
                    results = r.json()["results"]
                    if len(results) != batch or not all(x["routed"] and x["confirmed"] for x in results):
                        failures.append("unrouted or unconfirmed")

        threads = [threading.Thread(target=client) for _ in range(clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        total = per_client * clients * batch
        depth = admin.get(f"/api/queues/%2F/{qname}").json().get("messages")
        admin.delete(f"/api/queues/%2F/{qname}")
    return {"messages": total, "batch": batch, "clients": clients, "persistent": persistent,
            "rate": total / elapsed, "queued": depth, "failures": failures[:3], "complete": not failures}
