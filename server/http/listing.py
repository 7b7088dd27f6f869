"""What the listing endpoints share: the vhosts a user may see, paging, and message stats with rates
in RabbitMQ's shape."""

from __future__ import annotations

from typing import Any

from headrace.server.broker import VHost

from .rates import FIELDS
from .routes import Context, HTTPError, Request, Response, json_response, user_of

__all__ = ["MAX_PAGE_SIZE", "message_stats", "page", "visible_vhosts"]

MAX_PAGE_SIZE = 500


def visible_vhosts(ctx: Context, req: Request) -> list[VHost]:
    """Every vhost for an administrator, else those the user has permissions in."""
    user = user_of(req)
    return [v for n, v in ctx.broker.vhosts.items()
            if user.is_administrator or ctx.broker.users.permission(user.name, n) is not None]


def page(req: Request, items: list[Any]) -> Response:
    """The whole list, or with ``?page=`` RabbitMQ's page object."""
    number_arg = req.arg("page")
    if number_arg is None:
        return json_response(200, items)
    try:
        number = max(1, int(number_arg))
        size = max(1, int(req.arg("page_size", "100") or 100))
    except ValueError:
        raise HTTPError(400, "bad_request", "page and page_size must be integers") from None
    if size > MAX_PAGE_SIZE:  # RabbitMQ refuses rather than silently capping
        raise HTTPError(400, "bad_request", f"page_size must be <= {MAX_PAGE_SIZE}")
    chunk = items[(number - 1) * size:number * size]
    return json_response(200, {"items": chunk, "page": number, "page_size": size,
                               "page_count": (len(items) + size - 1) // size, "total_count": len(items),
                               "item_count": len(chunk), "filtered_count": len(items)})


def message_stats(ctx: Context, key: tuple[str, str], owner: object, counts: tuple[int, ...]) -> dict[str, Any]:
    """Counters with their rates, in RabbitMQ's shape: ``publish`` and ``publish_details: {"rate"}``."""
    rates = ctx.rates.sample(key, owner, counts, ctx.now)
    out: dict[str, Any] = {}
    for (_, name), count in zip(FIELDS, counts, strict=True):
        out[name] = count
        out[name + "_details"] = {"rate": rates[name]}
    return out
