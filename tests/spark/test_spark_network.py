"""The ``headrace`` source over the broker's HTTP API (``url``) instead of its data directory (``path``):
the same rows either way, for a mirrored exchange, a stream and a super stream, batch and streaming,
over http and https; a user without read permission is refused with a line that says so."""

from __future__ import annotations

import subprocess
import time

import httpx
import pika
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

BROKER_ENV: dict[str, str] = {}  # the ``broker`` fixture's settings: filled in by ``tls`` before it starts

N = 3000
SUPER_N = 900


def wait_for(check, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A self-signed certificate for the broker's HTTPS listener (its CA file for the reader)."""
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "server.pem", tmp / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    BROKER_ENV.update({"HEADRACE_TLS_CERTFILE": str(cert), "HEADRACE_TLS_KEYFILE": str(key), "HEADRACE_HTTPS_PORT": "0"})
    return str(cert)


@pytest.fixture(scope="module")
def net(tls, broker):
    """A broker with HTTPS too; a mirrored exchange, a stream and a super stream filled; a user
    ``outsider`` who may read nothing."""
    proc = broker
    proc.ca_file = tls
    api = httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10)
    api.put("/api/exchanges/%2F/orders", json={"type": "topic", "durable": True}).raise_for_status()
    api.put("/api/mirrors/%2F/orders", json={}).raise_for_status()
    api.put("/api/super-streams/%2F/invoices", json={"partitions": 3}).raise_for_status()
    api.put("/api/users/outsider", json={"password": "pw", "tags": "management"}).raise_for_status()
    api.put("/api/permissions/%2F/outsider", json={"configure": "", "write": "", "read": "^nothing$"}).raise_for_status()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    for i in range(N):
        props = pika.BasicProperties(headers={"n": str(i)}, message_id=f"m{i}") if i % 7 == 0 else None
        ch.basic_publish("orders", f"eu.{i % 13}", b"order-%d-" % i + bytes(i % 200), props)
    for i in range(N // 3):
        ch.basic_publish("", "events", b"event-%d" % i, pika.BasicProperties(content_type="text/plain"))
    for i in range(SUPER_N):
        ch.basic_publish("invoices", f"customer-{i % 50}", b"invoice-%d" % i)
    conn.close()
    wait_for(lambda: api.get("/api/mirrors").json()[0]["next_offset"] == N, "the mirror to hold every publish")
    yield proc, api
    api.close()


def over(spark, proc, *, user: str = "guest", password: str = "guest", https: bool = False, **options: str):
    url = f"https://127.0.0.1:{proc.ports['https']}" if https else proc.http_url
    reader = spark.read.format("headrace").option("url", url).option("user", user).option("password", password)
    if https:
        reader = reader.option("caFile", proc.ca_file)
    return reader.options(**options).load()


def local(spark, proc, **options: str):
    return spark.read.format("headrace").option("path", str(proc.data_dir)).options(**options).load()


def rows(df) -> list[tuple]:
    return sorted((r.exchange, r.offset, r.timestamp, r.routing_key, r.headers, r.message_id, r.content_type,
                   r.properties, r.body) for r in df.collect())


def test_a_network_read_equals_the_path_read(spark, net):
    proc, _ = net
    options = {"exchange": "orders", "partitionBytes": "16384"}  # many ranges, packed into several partitions
    remote, path = over(spark, proc, **options), local(spark, proc, **options)
    assert remote.count() == path.count() == N
    assert remote.rdd.getNumPartitions() > 2
    got = rows(remote)
    assert got == rows(path)
    assert got[7][8] == b"order-7-" + bytes(7) and got[7][4] == {"n": "7"} and got[7][5] == "m7"
    bounded = {"fromOffset": "100", "toOffset": "2500", "routingKey": "eu.3"}
    assert rows(over(spark, proc, exchange="orders", **bounded)) == rows(local(spark, proc, exchange="orders", **bounded))


def test_https_and_a_stream_queue(spark, net):
    proc, _ = net
    remote = over(spark, proc, https=True, stream="events")
    assert rows(remote) == rows(local(spark, proc, stream="events"))
    assert remote.count() == N // 3


def test_a_super_stream_reads_as_one_dataframe_partitioned_by_its_streams(spark, net):
    proc, _ = net
    df = over(spark, proc, superStream="invoices", partitionBytes="4096")
    got = rows(df)
    assert len(got) == SUPER_N
    assert sorted(int(r[8].split(b"-")[1]) for r in got) == list(range(SUPER_N))
    assert {r[0] for r in got} == {"invoices-0", "invoices-1", "invoices-2"}
    assert got == rows(local(spark, proc, superStream="invoices", partitionBytes="4096"))
    # every Spark partition holds rows of one stream partition only
    per_partition = df.rdd.mapPartitions(lambda it: [{r.exchange for r in it}]).collect()
    assert all(len(names) <= 1 for names in per_partition)
    assert len([n for n in per_partition if n]) >= 3


def test_a_user_without_read_permission_is_refused(spark, net):
    proc, api = net
    r = httpx.get(f"{proc.http_url}/api/mirrors/%2F/orders/log", auth=("outsider", "pw"), timeout=10)
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised",
                        "reason": "read access to 'orders' in vhost '/' refused for user 'outsider'"}
    r = httpx.get(f"{proc.http_url}/api/mirrors/%2F/orders/segments/0", auth=("outsider", "pw"), timeout=10)
    assert r.status_code == 401
    with pytest.raises(Exception) as refused:
        over(spark, proc, user="outsider", password="pw", exchange="orders").count()
    assert "refused the log of exchange 'orders' in vhost '/' to user 'outsider'" in str(refused.value)
    assert "read permission" in str(refused.value)


def test_range_reads_serve_the_segment_bytes(net):
    proc, api = net
    segment = next((proc.data_dir / "mirror" / "%2F" / "orders").glob("*.log")).read_bytes()
    r = api.get("/api/mirrors/%2F/orders/segments/0", headers={"range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == segment[100:200]
    assert r.headers["content-range"] == f"bytes 100-199/{len(segment)}"
    assert api.get("/api/mirrors/%2F/orders/segments/0").content == segment
    assert api.get("/api/mirrors/%2F/orders/segments/0", params={"start": 5, "stop": 9}).content == segment[5:9]
    assert api.get("/api/mirrors/%2F/orders/segments/0", headers={"range": f"bytes={len(segment)}-"}).status_code == 416
    assert api.get("/api/mirrors/%2F/orders/segments/12345").status_code == 404
    assert api.get("/api/mirrors/%2F/nothing/log").status_code == 404
    plan = api.get("/api/mirrors/%2F/orders/log", params={"target_bytes": 8192}).json()
    assert plan["next_offset"] == N and plan["segments"][0]["size"] == len(segment)
    assert [r["first_offset"] for r in plan["ranges"]][0] == 0 and len(plan["ranges"]) > 4


def test_read_stream_over_the_network(spark, net, tmp_path):
    proc, _ = net
    for attempt in range(3):
        query = (spark.readStream.format("headrace").option("url", proc.http_url).option("user", "guest")
                 .option("password", "guest").option("superStream", "invoices").load()
                 .writeStream.format("memory").queryName(f"net_invoices{attempt}").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / f"chk{attempt}")).start())
        try:
            query.awaitTermination(120)
            break
        except Exception as exc:
            # Spark gives the Python process that plans a streaming source a fixed 10 s to connect
            # back (PythonWorkerFactory.createSimpleWorker, not a setting): on a machine with a load
            # of 20 starting Python alone took longer. Anything else is a failure.
            if "Python worker failed to connect back" not in str(exc) or attempt == 2:
                raise
    assert spark.sql(f"select count(*) from net_invoices{attempt}").collect()[0][0] == SUPER_N


def test_export_a_super_stream(spark, net, tmp_path):
    from test_spark_replay import spark_cli, spark_env

    proc, _ = net
    out = tmp_path / "invoices"
    r = subprocess.run(spark_cli("export", "--data-dir", str(proc.data_dir), "--super-stream", "invoices",
                                 "--out", str(out)), env=spark_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"exported {SUPER_N} rows" in r.stderr
    exported = spark.read.parquet(str(out))
    assert sorted((r.exchange, r.offset, r.body) for r in exported.collect()) == \
        sorted((r[0], r[1], r[8]) for r in rows(local(spark, proc, superStream="invoices")))
    r = subprocess.run(spark_cli("export", "--data-dir", str(proc.data_dir), "--super-stream", "nothing",
                                 "--out", str(tmp_path / "none")), env=spark_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: super stream 'nothing' in vhost '/' has no partition stream with a log under "
        f"{proc.data_dir / 'streams'}: create it with `headrace stream add-super nothing` and publish to it first")
