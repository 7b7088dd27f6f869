"""The management API's rate history (``server/http/history.py``) and its sampler
(``server/http/sampler.py``), driven with explicit times: the rings per level, the rows kept only
on change, the downsampling onto coarser levels, the bound per level, RabbitMQ's ``samples`` shape
and rates, and the sampler as a timer in the broker's one deadline heap."""

from __future__ import annotations

import pytest
from shell_ports import shell_ports

from headrace.server.broker import Broker
from headrace.server.http.history import History, Policy, Range, Series
from headrace.server.http.rates import QUEUE_STATS
from headrace.server.http.sampler import SLICE, StatsSampler

BASIC = Policy(((60, 5), (600, 60)))
GLOBAL = Policy(((60, 5), (600, 60), (3600, 600)))
S = 1000  # ms


def rows(series: Series, level: int, width: int) -> list[tuple[int, ...]]:
    arr = series.levels[level]
    return [tuple(arr[i:i + width + 1]) for i in range(0, len(arr), width + 1)]


def test_a_row_is_kept_only_when_the_values_change_and_coarse_levels_keep_the_newest_of_their_interval():
    s = Series(owner=None, born=0, levels=2, width=1)
    for t, v in [(0, 0), (5, 0), (10, 3), (15, 3), (20, 7), (60, 9), (65, 9), (70, 12)]:
        s.record(BASIC, t * S, (v,))
    # the 5-s level: 0, then each change; the 60-s level: one row per minute, its newest sample
    assert rows(s, 0, 1) == [(0, 0), (10 * S, 3), (20 * S, 7), (60 * S, 9), (70 * S, 12)]
    assert rows(s, 1, 1) == [(0, 0), (60 * S, 9), (120 * S, 12)]


def test_each_level_is_bounded_and_forgets_its_oldest_rows():
    s = Series(owner=None, born=0, levels=2, width=1)
    for t in range(0, 2000, 5):
        s.record(BASIC, t * S, (t,))
    assert len(rows(s, 0, 1)) == BASIC.capacity(0) == 13
    assert len(rows(s, 1, 1)) == BASIC.capacity(1) == 11
    assert rows(s, 0, 1)[-1] == (1995 * S, 1995)
    # a point older than the level keeps is left out, not made up
    pts = s.points(0, Range(1900 * S, 1995 * S, 5 * S))
    assert [t for t, _ in pts] == list(range(1935 * S, 1996 * S, 5 * S))


def test_points_carry_the_last_row_forward_and_read_zero_before_the_object_existed():
    s = Series(owner=None, born=20 * S, levels=2, width=1)
    s.record(BASIC, 20 * S, (4,))
    s.record(BASIC, 25 * S, (6,))
    pts = s.points(0, Range(0, 45 * S, 5 * S))
    assert pts == [(t * S, (v,)) for t, v in
                   [(0, 0), (5, 0), (10, 0), (15, 0), (20, 4), (25, 6), (30, 6), (35, 6), (40, 6), (45, 6)]]


def sampled(values: list[tuple[int, int]]) -> History:
    """A history of one queue's counters: (seconds, publish count)."""
    h = History(GLOBAL, BASIC)
    owner = object()
    for t, v in values:
        fresh: dict = {}
        h.record(fresh, ("queue", "/", "q"), owner, t * S, (v,) + (0,) * (len(QUEUE_STATS) - 1))
        h.replace(fresh, t * S)
    return h


def test_samples_in_rabbitmqs_shape_newest_first_with_avg_and_avg_rate():
    h = sampled([(100, 0), (105, 10), (110, 30), (115, 60)])
    out = h.details([("queue", "/", "q")], ("publish",), (60,), Range(100 * S, 115 * S, 5 * S))
    d = out["publish_details"]
    assert out["publish"] == 60
    assert d["samples"] == [{"sample": 60, "timestamp": 115_000}, {"sample": 30, "timestamp": 110_000},
                            {"sample": 10, "timestamp": 105_000}, {"sample": 0, "timestamp": 100_000}]
    assert d["rate"] == 6.0  # the last two points: 30 in 5 s
    assert d["avg_rate"] == 4.0  # 60 in 15 s
    assert d["avg"] == 25.0


def test_a_range_older_than_the_finest_level_is_read_from_a_coarser_one():
    h = sampled([(t, t) for t in range(0, 400, 5)])
    out = h.details([("queue", "/", "q")], ("publish",), (395,), Range(0, 360 * S, 60 * S))
    stamps = [p["timestamp"] for p in out["publish_details"]["samples"]]
    assert stamps == [t * S for t in range(360, -1, -60)]
    assert [p["sample"] for p in out["publish_details"]["samples"]] == list(range(360, -1, -60))


def test_the_instant_rate_is_from_the_last_two_ticks_and_zero_for_a_series_with_one_sample():
    assert sampled([(0, 0)]).details([("queue", "/", "q")], ("publish",), (0,), None)["publish_details"] == {
        "rate": 0.0}
    h = sampled([(0, 0), (5, 50)])
    assert h.details([("queue", "/", "q")], ("publish",), (50,), None)["publish_details"] == {"rate": 10.0}
    # a counter that went down (its objects went) is no traffic; a gauge's rate may be negative
    h = sampled([(0, 50), (5, 20)])
    assert h.details([("queue", "/", "q")], ("publish",), (20,), None)["publish_details"] == {"rate": 0.0}
    assert h.details([("queue", "/", "q")], ("publish",), (20,), None, signed=True)["publish_details"] == {
        "rate": -6.0}


def test_a_new_object_under_the_same_key_starts_a_new_series():
    h = History(GLOBAL, BASIC)
    fresh: dict = {}
    h.record(fresh, ("exchange", "/", "x"), "first", 0, (5, 5))
    h.replace(fresh, 0)
    fresh = {}
    h.record(fresh, ("exchange", "/", "x"), "second", 5 * S, (0, 0))
    h.replace(fresh, 5 * S)
    assert h.series[("exchange", "/", "x")].owner == "second"
    assert rows(h.series[("exchange", "/", "x")], 0, 2) == [(5 * S, 0, 0)]


@pytest.mark.parametrize(("policy", "reported"), [
    (Policy(((605, 5), (3660, 60), (29400, 600), (86400, 1800))), [600, 3600, 28800, 86400]),
    (Policy(((605, 5), (3600, 60))), [600, 3600]),
    (Policy(((20, 1),)), [20]),
])
def test_the_overview_reports_each_level_as_rabbitmq_does(policy: Policy, reported: list[int]):
    assert policy.reported() == reported


def test_the_sampler_is_a_timer_in_the_brokers_deadline_heap_and_follows_the_objects():
    broker = Broker(ports=shell_ports())
    vhost = broker.add_vhost("/")
    vhost.declare_queue("q", now=0.0, owner=None)
    history = History(GLOBAL, BASIC)
    sampler = StatsSampler(broker, history, lambda: {})
    sampler.start(1.2)
    assert broker.next_deadline() == 5.0  # the next multiple of the finest interval
    broker.tick(5.003)  # the clock runs the due timer, a little late
    assert history.last_at == 5 * S and ("queue", "/", "q") in history.series
    assert broker.next_deadline() == 10.0
    for _ in range(4):
        broker.delivery.publish(vhost, "", "q", b"", b"m", 6.0)
    broker.tick(10.0)
    depth = history.details([("queue", "/", "q")], ("messages",), (4,), Range(0, 10 * S, 5 * S),
                            signed=True, column=len(QUEUE_STATS))["messages_details"]
    assert [p["sample"] for p in depth["samples"]] == [4, 0, 0] and depth["rate"] == 0.8
    stats = history.details([("overview",)], ("publish",), (4,), None)["publish_details"]
    assert stats == {"rate": 0.8}
    vhost.delete_queue("q")
    broker.tick(15.0)
    assert ("queue", "/", "q") not in history.series  # gone with its queue


def test_a_tick_walks_its_objects_in_slices_and_the_history_takes_them_at_the_end():
    """Over ``SLICE`` objects, a tick is several turns of the clock, each due at once: the event
    loop runs other work between them, and readers see the previous tick until the last slice."""
    broker = Broker(ports=shell_ports())
    vhost = broker.add_vhost("/")
    for i in range(SLICE + 500):
        vhost.declare_queue(f"q{i}", now=0.0, owner=None)
    history = History(GLOBAL, BASIC)
    StatsSampler(broker, history, lambda: {}).start(0.5)
    broker.tick(5.0)
    assert history.last_at == 0 and not history.series  # a slice done, nothing shown yet
    turns = 1
    while (due := broker.next_deadline()) is not None and due < 10.0:  # back at once for each slice
        broker.tick(due + 0.001)
        turns += 1
    assert turns == (SLICE + 500) // SLICE + 1  # a turn after each full slice, then the rest
    assert history.last_at == 5 * S and len([k for k in history.series if k[0] == "queue"]) == SLICE + 500
    assert broker.next_deadline() == 10.0
