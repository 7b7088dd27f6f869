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
from rich.text import Text

__all__ = ["BATCH", "FORMATS", "GLOBAL_KEY", "Client", "add_connection_options", "global_options", "console", "err", "fail", "kv_pairs", "pass_client",
           "reason_of"]

console = Console()
BATCH = 1000  # messages per publish-batch request
err = Console(stderr=True)


FORMATS = ("table", "tsv", "json")


class Client:
    def __init__(self, url: str, user: str, password: str, vhost: str, fmt: str, vhost_given: bool = True) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), auth=(user, password), timeout=30)
        self.vhost = vhost
        self.fmt = fmt
        self.vhost_given = vhost_given  # --vhost, HEADRACE_VHOST or cli.toml named one (listings filter by it)

    @property
    def as_json(self) -> bool:
        return self.fmt == "json"

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
        if self.fmt == "tsv":  # for scripts and `cut`: a header line, then one line per row, never wrapped
            click.echo("\t".join(columns))
            for row in rows:
                click.echo("\t".join(_cell(row.get(c, "")) for c in columns))
            return
        table = Table(*columns)  # rich shrinks and wraps columns to the terminal's width
        for row in rows:
            table.add_row(*(Text(_cell(row.get(c, ""))) for c in columns))  # Text: names are not markup
        console.print(table)


def _cell(value: Any) -> str:
    return " ".join(str(value).split())


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


GLOBAL_KEY = "headrace.global"


def global_options(group: click.Group) -> None:
    """The connection options also before the subcommand (``headrace --url U queue list``), as
    rabbitmqctl takes them; a flag after the subcommand wins over the same flag before it."""
    group.params.extend([
        click.Option(["--url"], envvar="HEADRACE_URL",
                     help="HTTP API of the broker (HEADRACE_URL) [http://127.0.0.1:15672]."),
        click.Option(["--user"], envvar="HEADRACE_USER", help="User (HEADRACE_USER) [guest]."),
        click.Option(["--password"], envvar="HEADRACE_PASSWORD", help="Password (HEADRACE_PASSWORD) [guest]."),
        click.Option(["--vhost"], envvar="HEADRACE_VHOST", help="Vhost (HEADRACE_VHOST) [/]; queue list: all."),
        click.Option(["--json", "as_json"], is_flag=True, help="Same as --format json."),
        click.Option(["--format", "fmt"], type=click.Choice(FORMATS), help="Output of listings [table]."),
    ])


def add_connection_options(command: click.Command) -> None:
    """Every leaf command takes --url/--user/--password/--vhost/--json/--format and builds the client:
    its own flag, else the same flag before the subcommand or its environment variable, else
    cli.toml, else the default."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_connection_options(sub)
        return
    command.params.extend([
        click.Option(["--url"], show_default="http://127.0.0.1:15672", help="HTTP API of the broker (HEADRACE_URL)."),
        click.Option(["--user"], show_default="guest", help="(HEADRACE_USER)"),
        click.Option(["--password"], help="(HEADRACE_PASSWORD)"),
        click.Option(["--vhost"], show_default="/", help="(HEADRACE_VHOST)"),
        click.Option(["--json", "as_json"], is_flag=True, help="Machine-readable output."),
        click.Option(["--format", "fmt"], type=click.Choice(FORMATS), help="Output of listings: table, tsv or json."),
    ])
    callback = command.callback
    assert callback is not None

    def wrapped(url: str | None, user: str | None, password: str | None, vhost: str | None, as_json: bool | None,
                fmt: str | None, **kw: Any) -> Any:
        ctx = click.get_current_context()
        outer: dict[str, Any] = ctx.find_root().meta.get(GLOBAL_KEY, {})
        own = {"url": url, "user": user, "password": password, "vhost": vhost}
        file = _cli_config()
        defaults = {"url": "http://127.0.0.1:15672", "user": "guest", "password": "guest", "vhost": "/"}
        value: dict[str, str] = {}
        for k, given in own.items():
            before = outer.get(k)
            value[k] = given if given is not None else str(before) if before is not None else file.get(k, defaults[k])
        vhost_given = vhost is not None or outer.get("vhost") is not None or "vhost" in file
        json_flag = as_json or outer.get("as_json")
        chosen = fmt or ("json" if json_flag else None) or outer.get("fmt") or "table"
        ctx.obj = Client(value["url"], value["user"], value["password"], value["vhost"], chosen, vhost_given)
        return callback(**kw)

    command.callback = wrapped
