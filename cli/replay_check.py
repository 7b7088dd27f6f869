"""Before a ``headrace replay``: does the target exchange have a dedup window that makes it exactly once?

A replay killed and resumed re-sends up to 2 x (window + a piece) publishes per partition
(``spark_bridge/replay.py``); only the target's window, holding at least 3 x partitions x window
keys read from the replay's header, drops those the broker already has. Without it, a resume
delivers them twice. So the command refuses to start, in one line that says what to declare, when
the window is missing, too small or reads another header, unless ``--at-least-once`` accepts
duplicates. The window is read from the exchange's arguments over the management API, or from the
policy applied to it (``deduplication-*`` keys; the exchange's own argument wins, as the broker
decides).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

__all__ = ["DEFAULT_HTTP_PORT", "dedup_problem", "dedup_window", "http_url_of", "needed_keys", "target_api",
           "window_problem"]

DEFAULT_HTTP_PORT = 15672
# the policy keys of a dedup window and the exchange arguments they stand for (server/broker/policies.py)
POLICY_KEYS = {"message-deduplication": "x-message-deduplication", "deduplication-cache-size": "x-cache-size",
               "deduplication-cache-ttl": "x-cache-ttl", "deduplication-header": "x-deduplication-header"}
DEFAULT_HEADER = "x-deduplication-header"
DEFAULT_SIZE = 128


def needed_keys(partitions: int, window: int) -> int:
    """The window a resume needs: 3 x partitions x window (``spark_bridge/replay.py``)."""
    return 3 * partitions * window


def http_url_of(amqp_url: str) -> tuple[str, str, str, str]:
    """(HTTP API URL, user, password, vhost) guessed from the AMQP URL: the same host, port 15672."""
    u = urlsplit(amqp_url)
    scheme = "https" if u.scheme == "amqps" else "http"
    vhost = unquote(u.path[1:]) if len(u.path) > 1 else "/"
    return (f"{scheme}://{u.hostname or '127.0.0.1'}:{DEFAULT_HTTP_PORT}", unquote(u.username or "guest"),
            unquote(u.password or "guest"), vhost)


def _window(http: httpx.Client, vhost: str, exchange: str) -> dict[str, Any]:
    v, e = quote(vhost, safe=""), quote(exchange, safe="")
    r = http.get(f"/api/exchanges/{v}/{e}")
    r.raise_for_status()
    doc = r.json()
    args = dict(doc.get("arguments") or {})
    if doc.get("policy"):
        p = http.get(f"/api/policies/{v}/{quote(doc['policy'], safe='')}")
        if p.status_code == 200:
            for key, arg in POLICY_KEYS.items():
                if key in (p.json().get("definition") or {}):
                    args.setdefault(arg, p.json()["definition"][key])
    return args


def target_api(amqp_url: str, http_url: str | None) -> tuple[str, str, str, str]:
    """(HTTP API URL, user, password, vhost) of the target: ``http_url`` when given (credentials in it
    win, and are taken out of the URL), else guessed from the AMQP URL."""
    guessed, user, password, vhost = http_url_of(amqp_url)
    url = http_url or guessed
    given = urlsplit(url)
    if given.username:
        user, password = unquote(given.username), unquote(given.password or "")
        url = url.replace(given.netloc, given.netloc.rpartition("@")[2], 1)
    return url, user, password, vhost


def window_problem(args: dict[str, Any], exchange: str, need: int, header: str, *, who: str, risk: str,
                   short: str) -> str | None:
    """What keeps a window of these arguments from dropping ``need`` re-sent keys read from
    ``header``, in one line (None: nothing). ``who`` sends ("the replay"), ``risk`` says what a
    missing window costs, ``short`` names the ``need`` a too small one misses."""
    how = (f"declare it with `-a x-message-deduplication=true -a x-cache-size={need}` (or a policy with "
           f"message-deduplication and deduplication-cache-size), or give --at-least-once to accept duplicates")
    enabled = args.get("x-message-deduplication")
    if enabled is not True and str(enabled).lower() != "true":
        return f"target exchange '{exchange}' has no dedup window (x-message-deduplication), so {risk}: {how}"
    size = int(args.get("x-cache-size") or DEFAULT_SIZE)
    if size < need:
        return f"target exchange '{exchange}' keeps {size} dedup keys (x-cache-size), fewer than the {short}: {how}"
    reads = args.get("x-deduplication-header") or DEFAULT_HEADER
    if reads != header:
        return (f"target exchange '{exchange}' deduplicates on the header '{reads}', {who} sets '{header}': "
                f"give --dedup-header {reads}, or give --at-least-once to accept duplicates")
    return None


def dedup_problem(http_url: str, user: str, password: str, vhost: str, exchange: str, *, partitions: int,
                  window: int, header: str) -> str | None:
    """What keeps ``exchange`` from dropping a resumed replay's re-sends, in one line (None: nothing).
    Raises ``httpx.HTTPError`` when the API cannot be asked."""
    need = needed_keys(partitions, window)
    return window_problem(
        dedup_window(http_url, user, password, vhost, exchange), exchange, need, header, who="the replay",
        risk=f"a replay resumed after a kill can deliver up to {need} messages twice",
        short=f"{need} (3 x {partitions} partitions x {window} window) a resumed replay can re-send")


def dedup_window(http_url: str, user: str, password: str, vhost: str, exchange: str) -> dict[str, Any]:
    """The exchange's dedup arguments as the broker applies them (its own, else its policy's).
    Raises ``httpx.HTTPError`` when the API cannot be asked."""
    with httpx.Client(base_url=http_url.rstrip("/"), auth=(user, password), timeout=10) as http:
        return _window(http, vhost, exchange)
