"""The leader's ship wakes the follower tasks only when the tap held something to send: an idle
leader's tick (every heartbeat interval) leaves them to their heartbeat timer."""

from __future__ import annotations

from pathlib import Path

from headrace.persistence.replica_tap import WRITE, Tap
from headrace.server.net.replication_leader import FollowerState, ReplicationLeader


async def _written(_names: list[str]) -> bool:
    return True


def test_ship_wakes_the_followers_only_when_the_tap_held_something(tmp_path: Path) -> None:
    tap = Tap(tmp_path)
    leader = ReplicationLeader(tap, tmp_path, "hr1@localhost", 1, min_in_sync=None, members=3, in_sync=None,
                               may_confirm=lambda: True, write_in_sync=_written, lag_timeout=1.5)
    follower = leader.followers["hr2@localhost"] = FollowerState("hr2@localhost")
    assert leader.ship() == 0
    assert not follower.ready.is_set() and not leader.backlog
    tap.add(WRITE, tmp_path / "store" / "0001.seg", 0, b"record")
    assert leader.ship() == 1
    assert follower.ready.is_set() and [pos for pos, _ in leader.backlog] == [1]
    follower.ready = type(follower.ready)()  # the follower task's next wait
    assert leader.ship() == 1
    assert not follower.ready.is_set()
