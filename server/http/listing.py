"""What the listing endpoints share: the vhosts a user may see, paging, and message stats with rates
in RabbitMQ's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.server.broker import VHost

from .list_query import MAX_PAGE_SIZE, apply_query
from .history import Key, Range
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


def rated(ctx: Context, keys: Key | list[Key], names: tuple[str, ...], counts: tuple[int, ...], *,
          ages: str = "msg_rates", signed: bool = False, column: int = 0) -> dict[str, Any]:
    """Counters (or gauges, ``signed``) as they are now, with their rates from the history the
    sampler keeps of ``keys`` (one series, or several summed), in RabbitMQ's shape: ``publish`` and
    ``publish_details: {"rate"}``; with the samples, ``avg`` and ``avg_rate`` when the request asked
    for history under the ``ages`` prefix (``lengths``, ``msg_rates``, ``data_rates``,
    ``node_stats``), as RabbitMQ's UI does for its charts. ``column``: where the family starts in
    its object's series (``rates.py``)."""
    return ctx.history.details(keys if isinstance(keys, list) else [keys], names, counts, query_range(ctx, ages),
                               signed=signed, column=column)


def query_range(ctx: Context, ages: str) -> Range | None:
    """The request's grid for ``ages``, as RabbitMQ makes it: ``last`` the request's time rounded
    to ``incr`` (up for lengths, so they are as fresh as the other figures; down for rates, and one
    step further while that point's tick has not run yet, so the newest rate is not a false 0),
    ``first`` the age before it."""
    asked = ctx.ranges.get(ages)
    if asked is None:
        return None
    age, incr = asked
    now = int(ctx.now * 1000)
    if ages == "lengths":
        last = -(-now // incr) * incr
    else:
        last = now // incr * incr
        if last > ctx.history.last_at:
            last -= incr
    return Range(last - age, last, incr)
