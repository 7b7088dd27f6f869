"""RabbitMQ's list query parameters on plain lists: filter, sort by dotted path, columns, pages."""

from __future__ import annotations

import pytest

from headrace.server.http.list_query import apply_query
from headrace.server.http.routes import HTTPError, Request

ROWS = [{"name": f"q-{i}", "messages": i % 3, "message_stats": {"publish_details": {"rate": float(i)}}}
        for i in range(10)]


def query(**args: str) -> Request:
    return Request("GET", "/api/queues", {k: [v] for k, v in args.items()}, {}, b"")


def test_without_parameters_the_list_is_unchanged():
    assert apply_query(query(), ROWS) == ROWS


def test_name_filters_as_substring_or_regex_case_insensitively():
    assert [r["name"] for r in apply_query(query(name="Q-1"), ROWS)] == ["q-1"]
    assert [r["name"] for r in apply_query(query(name="^q-[27]$", use_regex="true"), ROWS)] == ["q-2", "q-7"]
    with pytest.raises(HTTPError) as exc:
        apply_query(query(name="(", use_regex="true"), ROWS)
    assert exc.value.status == 400


def test_sort_by_dotted_path_reversed_and_columns_cut_nested_objects():
    rows = apply_query(query(sort="message_stats.publish_details.rate", sort_reverse="true",
                             columns="name,message_stats.publish_details.rate"), ROWS)
    assert rows[0] == {"name": "q-9", "message_stats": {"publish_details": {"rate": 9.0}}}
    assert [r["name"] for r in rows][-1] == "q-0"


def test_pages_count_the_filtered_rows_and_refuse_a_page_past_the_end():
    page = apply_query(query(page="2", page_size="4", sort="name"), ROWS)
    assert (page["page"], page["page_count"], page["item_count"], page["total_count"]) == (2, 3, 4, 10)
    assert page["items"][0]["name"] == "q-4"
    filtered = apply_query(query(page="1", page_size="4", name="q-1"), ROWS)
    assert filtered["filtered_count"] == 1 and filtered["total_count"] == 10
    with pytest.raises(HTTPError):
        apply_query(query(page="4", page_size="4"), ROWS)
    with pytest.raises(HTTPError):
        apply_query(query(page="1", page_size="501"), ROWS)
    assert apply_query(query(page="1"), [])["items"] == []  # an empty list still has page 1
