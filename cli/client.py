"""The CLI's HTTP client of the broker's management API: connection options, errors, output.

Owner of how every management command talks to the broker and reports: exit codes 0 ok, 1 the
broker refused (its ``reason`` is printed), 2 usage error (click), 3 broker unreachable.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn
from urllib.parse import quote

import click
import httpx
from rich.console import Console
from rich.table import Table

__all__ = ["BATCH", "Client", "add_connection_options", "console", "err", "fail", "kv_pairs", "pass_client",
           "reason_of"]

console = Console()
BATCH = 1000  # messages per publish-batch request
err = Console(stderr=True)


class Client:
    def __init__(self, url: str, user: str, password: str, vhost: str, as_json: bool) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), auth=(user, password), timeout=30)
        self.vhost = vhost
        self.as_json = as_json

    @property
    def v(self) -> str:
        return quote(self.vhost, safe="")

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            r = self.http.request(method, path, json=body, params=params)
        except httpx.TransportError as exc:
            fail(f"cannot reach the broker at {self.http.base_url}: {exc}", 3)
        if r.status_code >= 400:
            try:
                reason = r.json().get("reason", r.text)
            except ValueError:
                reason = r.text
            fail(f"{reason} (HTTP {r.status_code})", 1)
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None

    def done(self, text: str, action: str, **result: Any) -> None:
        """Report a change: one line of text, or with --json an object (action, vhost and the names)."""
        if self.as_json:
            click.echo(json.dumps({"action": action, "vhost": self.vhost, **result}))
        else:
            console.print(text, markup=False, highlight=False)

    def show(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        if self.as_json:
            console.print_json(json.dumps(rows, default=str))
            return
        table = Table(*columns)
        for row in rows:
            table.add_row(*(str(row.get(c, "")) for c in columns))
        console.print(table)


pass_client = click.make_pass_decorator(Client)


def fail(message: str, code: int) -> NoReturn:
    """One plain line on stderr (no rich wrapping or [markup] parsing: reasons quote names verbatim)."""
    click.echo("Error: " + " ".join(message.split()), err=True)
    sys.exit(code)


def reason_of(r: httpx.Response) -> str:
    try:
        return str(r.json().get("reason", r.text))
    except (ValueError, AttributeError):
        return r.text


def kv_pairs(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _cli_config() -> dict[str, str]:
    """Defaults from a TOML file (``HEADRACE_CLI_CONFIG``, else ~/.config/headrace/cli.toml) with
    keys url, user, password, vhost; flags and environment variables take precedence."""
    import os
    import tomllib
    from pathlib import Path

    path = Path(os.environ.get("HEADRACE_CLI_CONFIG", Path.home() / ".config" / "headrace" / "cli.toml"))
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("url", "user", "password", "vhost")}


def add_connection_options(command: click.Command) -> None:
    """Every leaf command takes --url/--user/--password/--vhost/--json and builds the client."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_connection_options(sub)
        return
    command.params.extend([
        click.Option(["--url"], envvar="HEADRACE_URL", default=lambda: _cli_config().get("url", "http://127.0.0.1:15672"),
                     show_default="http://127.0.0.1:15672", help="HTTP API of the broker."),
        click.Option(["--user"], envvar="HEADRACE_USER", default=lambda: _cli_config().get("user", "guest"),
                     show_default="guest"),
        click.Option(["--password"], envvar="HEADRACE_PASSWORD", default=lambda: _cli_config().get("password", "guest")),
        click.Option(["--vhost"], envvar="HEADRACE_VHOST", default=lambda: _cli_config().get("vhost", "/"), show_default="/"),
        click.Option(["--json", "as_json"], is_flag=True, help="Machine-readable output."),
    ])
    callback = command.callback
    assert callback is not None

    def wrapped(url: str, user: str, password: str, vhost: str, as_json: bool, **kw: Any) -> Any:
        click.get_current_context().obj = Client(url, user, password, vhost, as_json)
        return callback(**kw)

    command.callback = wrapped
