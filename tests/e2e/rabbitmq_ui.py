"""Serves RabbitMQ 3.10's own management UI (static files out of Debian's rabbitmq-server package,
unpacked by the Makefile's rabbitmqadmin target) and forwards ``/api/*`` to a broker's HTTP port:
what any static server in front of headrace does for an operator who keeps RabbitMQ's UI."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WWW = (Path(__file__).resolve().parents[2] / "build/rabbitmqadmin/deb/usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8"
       "/plugins/rabbitmq_management-3.10.8/priv/www")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class _Handler(SimpleHTTPRequestHandler):
    api = ""  # the broker's HTTP base URL

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(self.api + self.path, data=body, method=self.command,
                                         headers={k: v for k, v in self.headers.items()
                                                  if k.lower() not in HOP_BY_HOP})
        try:
            response = urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as error:
            response = error
        data = response.read()
        self.send_response(response.status)
        for key, value in response.headers.items():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/api/"):
            self._forward()
        else:
            super().do_GET()

    do_PUT = do_POST = do_DELETE = _forward


class UIServer:
    def __init__(self, api: str) -> None:
        handler = type("Handler", (_Handler,), {"api": api})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(WWW)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> UIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
