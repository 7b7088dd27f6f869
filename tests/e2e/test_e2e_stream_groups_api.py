"""Consumer groups in the HTTP API and /metrics: per partition of a super stream (or for a stream
alone), the active member, the group's committed offset and its lag, from real pika members."""

from __future__ import annotations

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from exposition_lint import problems

pytestmark = pytest.mark.timeout(60)

BROKER_ENV = {"HEADRACE_METRICS": "per-queue"}


class Member:
    def __init__(self, broker, group: str, streams: list[str], super_stream: str | None) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=50)
        self.got = 0
        args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first"}
        if super_stream is not None:
            args["x-super-stream"] = super_stream
        self.tags = [self.ch.basic_consume(s, self._on_message, arguments=args) for s in streams]

    def _on_message(self, chan, method, props, body) -> None:
        self.got += 1
        chan.basic_ack(method.delivery_tag)


def publish(broker, exchange: str, keys: list[str]) -> None:
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for key in keys:
            ch.basic_publish(exchange, key, key.encode())


def pump_until(members: list[Member], cond) -> bool:
    return wait_until(lambda: ([m.conn.process_data_events(0.02) for m in members], cond())[1], timeout=10)


def test_super_stream_group_per_partition_then_lag_after_the_members_leave(broker, http):
    name, group = unique("gss"), unique("grp")
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 3}).status_code == 201
    streams = [f"{name}-{i}" for i in range(3)]
    publish(broker, name, [str(i % 3) for i in range(30)])  # binding keys: 10 per partition
    a, b = Member(broker, group, streams, name), Member(broker, group, streams, name)
    assert pump_until([a, b], lambda: a.got + b.got == 30)
    # acks reach the broker after the deliveries: poll until every partition's offset is 9
    url = f"/api/stream-groups/%2F/{name}"
    assert wait_until(lambda: [p["committed_offset"] for p in http.get(url).json()[0]["partitions"]] == [9, 9, 9])
    [shown] = http.get(url).json()
    assert {k: shown[k] for k in ("vhost", "name", "stream", "super_stream", "members", "lag")} == \
        {"vhost": "/", "name": group, "stream": name, "super_stream": True, "members": 2, "lag": 0}
    # member i mod 2 is active on partition i; the other one waits
    owners = [a.tags[0], b.tags[1], a.tags[2]]
    assert [p["active_consumer"]["consumer_tag"] for p in shown["partitions"]] == owners
    assert [(p["stream"], p["partition"], p["waiting"], p["lag"]) for p in shown["partitions"]] == \
        [(s, i, 1, 0) for i, s in enumerate(streams)]
    assert shown["partitions"][0]["active_consumer"]["channel_details"]["number"] == 1
    assert http.get(f"/api/super-streams/%2F/{name}").json()["groups"] == [shown]
    assert shown in http.get("/api/stream-groups/%2F").json()
    a.conn.close()
    b.conn.close()
    publish(broker, name, ["0"] * 7)  # no member: the group's lag grows from its committed offset
    assert wait_until(lambda: http.get(url).json()[0]["lag"] == 7)
    [left] = http.get(url).json()
    assert [(p["active_consumer"], p["waiting"], p["committed_offset"], p["lag"]) for p in left["partitions"]] == \
        [(None, 0, 9, 7), (None, 0, 9, 0), (None, 0, 9, 0)]
    assert left["members"] == 0
    text = httpx.get(f"{broker.http_url}/metrics", timeout=10).text
    assert f'headrace_stream_group_lag{{vhost="/",stream="{name}",group="{group}"}} 7' in text
    assert problems(text) == []


def test_group_on_a_stream_alone_and_unknown_names(broker, http):
    stream, group = unique("gs"), unique("grp")
    assert http.put(f"/api/queues/%2F/{stream}", json={"durable": True,
                                                        "arguments": {"x-queue-type": "stream"}}).status_code == 201
    publish(broker, "", [stream] * 5)
    a = Member(broker, group, [stream], None)
    assert pump_until([a], lambda: a.got == 5)
    url = f"/api/stream-groups/%2F/{stream}"
    assert wait_until(lambda: http.get(url).json()[0]["partitions"][0]["committed_offset"] == 4)
    [shown] = http.get(url).json()
    assert (shown["stream"], shown["super_stream"], shown["members"], shown["lag"]) == (stream, False, 1, 0)
    assert shown["partitions"][0]["active_consumer"]["consumer_tag"] == a.tags[0]
    a.conn.close()
    r = http.get("/api/stream-groups/%2F/no-such-stream")
    assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
    assert "no stream 'no-such-stream' in vhost '/'" in r.json()["reason"]
    assert http.get("/api/stream-groups/no-such-vhost").status_code == 404


def test_aggregate_metrics_show_the_largest_group_lag_without_names(broker_factory):
    other = broker_factory(env={"HEADRACE_METRICS": "aggregate"})
    name, group = unique("agg"), unique("grp")
    with httpx.Client(base_url=other.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2}).status_code == 201
        publish(other, name, ["0", "1", "1"])
        a = Member(other, group, [f"{name}-0", f"{name}-1"], name)
        assert pump_until([a], lambda: a.got == 3)
        a.conn.close()
        publish(other, name, ["1"] * 4)
        metric = 'headrace_vhost_stream_group_lag_max{vhost="/"} 4'
        assert wait_until(lambda: metric in httpx.get(f"{other.http_url}/metrics", timeout=10).text)
        text = httpx.get(f"{other.http_url}/metrics", timeout=10).text
        assert group not in text and problems(text) == []
