"""What the listing endpoints share: the vhosts a user may see, paging, and message stats with rates
in RabbitMQ's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.server.broker import VHost

from .list_query import MAX_PAGE_SIZE, apply_query
from .rates import Key, with_rates
from .routes import Context, Request, Response, json_response, user_of

__all__ = ["MAX_PAGE_SIZE", "page", "rated", "visible_vhosts"]


def visible_vhosts(ctx: Context, req: Request) -> list[VHost]:
    """Every vhost for an administrator, else those the user has permissions in."""
    user = user_of(req)
    return [v for n, v in ctx.broker.vhosts.items()
            if user.is_administrator or ctx.broker.users.permission(user.name, n) is not None]


def page(req: Request, items: list[Any], expand: Callable[[Any], Any] | None = None) -> Response:
    """The whole list, or with ``?page=`` RabbitMQ's page object; ``name``/``use_regex``, ``sort``/
    ``sort_reverse`` and ``columns`` apply either way (``list_query.py``, also for ``expand``)."""
    return json_response(200, apply_query(req, items, expand))


def rated(ctx: Context, key: Key, owner: object, names: tuple[str, ...], counts: tuple[int, ...], *,
          signed: bool = False) -> dict[str, Any]:
    """Counters (or gauges, ``signed``) with their rates, in RabbitMQ's shape: ``publish`` and
    ``publish_details: {"rate"}`` (``rates.py``), and their samples when the request asked for
    history (``ctx.want_samples``, as RabbitMQ's UI does for its charts)."""
    rates = ctx.rates.sample(key, owner, counts, ctx.now, signed=signed)
    return with_rates(names, counts, rates, ctx.rates.history(key) if ctx.want_samples else None)
