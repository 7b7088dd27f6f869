"""The etcd fixture itself: a real etcd answers on its JSON gateway, and comes back after a
restart with what it held."""

from __future__ import annotations

import base64

import httpx


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_etcd_answers_and_keeps_data_across_restart(etcd) -> None:
    r = httpx.post(f"{etcd.endpoint}/v3/kv/put", json={"key": b64("/fixture/a"), "value": b64("1")})
    assert r.status_code == 200, r.text
    etcd.restart()
    r = httpx.post(f"{etcd.endpoint}/v3/kv/range", json={"key": b64("/fixture/a")})
    assert r.status_code == 200, r.text
    assert [base64.b64decode(kv["value"]) for kv in r.json()["kvs"]] == [b"1"]
