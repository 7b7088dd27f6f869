"""AMQPS and HTTPS with a self-signed certificate, and client-certificate verification."""

from __future__ import annotations

import json
import ssl
import subprocess

import httpx
import pika
import pytest

pytestmark = pytest.mark.timeout(90)


def make_cert(directory, name: str) -> tuple[str, str]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


def start(broker_factory, tmp_path, *, verify_peer: bool, cafile: str | None = None):
    cert, key = make_cert(tmp_path, "server")
    env = {"HEADRACE_TLS_CERTFILE": cert, "HEADRACE_TLS_KEYFILE": key, "HEADRACE_AMQPS_PORT": "0",
           "HEADRACE_HTTPS_PORT": "0", "HEADRACE_TLS_VERIFY_PEER": "true" if verify_peer else "false"}
    if cafile:
        env["HEADRACE_TLS_CAFILE"] = cafile
    proc = broker_factory(env=env)
    ports = json.loads((proc.data_dir / "ports.json").read_text())
    return proc, ports, cert


def test_amqps_and_https(broker_factory, tmp_path):
    proc, ports, cert = start(broker_factory, tmp_path, verify_peer=False)
    ctx = ssl.create_default_context(cafile=cert)
    params = pika.ConnectionParameters("127.0.0.1", ports["amqps"], credentials=pika.PlainCredentials("guest", "guest"),
                                       ssl_options=pika.SSLOptions(ctx, "localhost"))
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"over tls")
    assert ch.basic_get(q, auto_ack=True)[2] == b"over tls"
    conn.close()
    r = httpx.get(f"https://127.0.0.1:{ports['https']}/api/overview", auth=("guest", "guest"), verify=ctx)
    assert r.status_code == 200 and r.json()["product_name"] == "headrace"


def test_client_certificate_required(broker_factory, tmp_path):
    client_cert, client_key = make_cert(tmp_path, "client")
    proc, ports, cert = start(broker_factory, tmp_path, verify_peer=True, cafile=client_cert)
    ctx = ssl.create_default_context(cafile=cert)
    no_cert = pika.ConnectionParameters("127.0.0.1", ports["amqps"], ssl_options=pika.SSLOptions(ctx, "localhost"),
                                        connection_attempts=1)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(no_cert)
    ctx.load_cert_chain(client_cert, client_key)
    with_cert = pika.ConnectionParameters("127.0.0.1", ports["amqps"], ssl_options=pika.SSLOptions(ctx, "localhost"))
    conn = pika.BlockingConnection(with_cert)
    assert conn.is_open
    conn.close()


def test_https_requires_a_client_certificate_signed_by_the_trusted_ca(broker_factory, tmp_path):
    client_cert, client_key = make_cert(tmp_path, "client")
    proc, ports, server_cert = start(broker_factory, tmp_path, verify_peer=True, cafile=client_cert)
    url = f"https://127.0.0.1:{ports['https']}/api/overview"
    no_cert = ssl.create_default_context(cafile=server_cert)
    with pytest.raises(httpx.TransportError):
        httpx.get(url, auth=("guest", "guest"), verify=no_cert, timeout=10)
    with_cert = ssl.create_default_context(cafile=server_cert)
    with_cert.load_cert_chain(client_cert, client_key)
    r = httpx.get(url, auth=("guest", "guest"), verify=with_cert, timeout=10)
    assert r.status_code == 200 and r.json()["product_name"] == "headrace"
    stranger_cert, stranger_key = make_cert(tmp_path, "stranger")  # not signed by the CA the broker trusts
    stranger = ssl.create_default_context(cafile=server_cert)
    stranger.load_cert_chain(stranger_cert, stranger_key)
    with pytest.raises(httpx.TransportError):
        httpx.get(url, auth=("guest", "guest"), verify=stranger, timeout=10)
    assert httpx.get(proc.http_url + "/api/overview", auth=("guest", "guest"), timeout=10).status_code == 200
