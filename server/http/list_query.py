"""RabbitMQ's list query parameters: ``name`` (with ``use_regex``), ``sort`` and ``sort_reverse``,
``columns``, and ``page``/``page_size`` (sync, no I/O).

``sort`` and ``columns`` take dotted paths into the objects (``message_stats.publish_details.rate``),
as RabbitMQ's do. Names are filtered case-insensitively, as a substring or as a regular expression
searched in the name. A page past the last one is a 400, as in RabbitMQ.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .routes import HTTPError, Request

__all__ = ["MAX_PAGE_SIZE", "apply_query", "flag", "sort_path"]

MAX_PAGE_SIZE = 500
_MISSING = object()


def flag(req: Request, name: str) -> bool:
    return (req.arg(name) or "").lower() == "true"


def _get(item: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return _MISSING
        item = item[key]
    return item


def _sort_key(value: Any) -> tuple[int, Any]:
    """Missing values first, then numbers, then everything else as text (a mixed column sorts)."""
    if value is _MISSING or value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


def _project(item: dict[str, Any], paths: list[list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        value = _get(item, path)
        if value is _MISSING:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _filter(req: Request, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    name = req.arg("name")
    if not name:
        return items
    if flag(req, "use_regex"):
        try:
            pattern = re.compile(name, re.IGNORECASE)
        except re.error as exc:
            raise HTTPError(400, "bad_request", f"invalid regular expression in name: {exc}") from None
        return [i for i in items if pattern.search(str(i.get("name", "")))]
    needle = name.lower()
    return [i for i in items if needle in str(i.get("name", "")).lower()]


def sort_path(req: Request) -> list[str] | None:
    sort = req.arg("sort")
    return sort.split(".") if sort else None


def apply_query(req: Request, items: list[dict[str, Any]],
                expand: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """The list as the query asks: filtered, sorted, paged and cut to ``columns``. Without ``page``
    the whole (filtered, sorted) list; with it RabbitMQ's page object. With ``expand`` the items
    are cheap stand-ins (enough to filter and sort on) made whole only for the rows returned, so a
    page of 100 out of 10k queues samples and renders 100."""
    total = len(items)
    items = _filter(req, items)
    sort = req.arg("sort")
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda i: _sort_key(_get(i, path)), reverse=flag(req, "sort_reverse"))
    elif flag(req, "sort_reverse"):
        items = items[::-1]
    columns = req.arg("columns")
    paths = [c.split(".") for c in columns.split(",") if c] if columns else None
    number_arg = req.arg("page")
    if number_arg is None:
        if expand is not None:
            items = [expand(i) for i in items]
        return [_project(i, paths) for i in items] if paths else items
    try:
        number = max(1, int(number_arg))
        size = max(1, int(req.arg("page_size", "100") or 100))
    except ValueError:
        raise HTTPError(400, "bad_request", "page and page_size must be integers") from None
    if size > MAX_PAGE_SIZE:  # RabbitMQ refuses rather than silently capping
        raise HTTPError(400, "bad_request", f"page_size must be <= {MAX_PAGE_SIZE}")
    page_count = (len(items) + size - 1) // size
    if number > max(1, page_count):
        raise HTTPError(400, "bad_request", "page out of range")
    chunk = items[(number - 1) * size:number * size]
    if expand is not None:
        chunk = [expand(i) for i in chunk]
    if paths:
        chunk = [_project(i, paths) for i in chunk]
    return {"items": chunk, "page": number, "page_size": size, "page_count": page_count,
            "total_count": total, "item_count": len(chunk), "filtered_count": len(items)}
