"""The coordinator's decisions (server/cluster/coordination.py) on etcd answers given as values:
the cases the real-etcd tests (tests/cluster) cannot steer, such as exact deadlines, an epoch
from the future, a lost campaign race and the in-sync rule."""

from __future__ import annotations

import json

import pytest

from headrace.server.cluster.coordination import (
    RETRY_AFTER, Coordinator, Fatal, Follow, Grant, Lead, Revoke, Role, StopConfirming, Transact, WatchFrom,
    lease_margin,
)
from headrace.server.cluster.etcd_model import KeyValue, Put, TxnResult

TTL = 5


def leader_kv(node: str, epoch: int, lease: int = 9) -> KeyValue:
    return KeyValue(b"/headrace/c/leader", json.dumps({"node": node, "epoch": epoch}).encode(), 3, 3, 1, lease)


def registered(core: Coordinator, leader: KeyValue | None = None, epoch: int = 0,
               in_sync: list[str] | None = None, now: float = 0.0) -> list:
    core.start(now)
    (register,) = core.lease_granted(7, TTL, now)
    assert isinstance(register, Transact) and register.purpose == "register"
    epoch_kvs = (KeyValue(core.epoch_key, str(epoch).encode(), 2, 2, 1),) if epoch else ()
    sync_kvs = (KeyValue(core.in_sync_key, json.dumps(in_sync).encode(), 4, 4, 1),) if in_sync is not None else ()
    result = TxnResult(True, 10, ((), (leader,) if leader else (), epoch_kvs, sync_kvs))
    return core.txn_done("register", result, now)


def won(core: Coordinator, now: float = 0.0) -> list:
    return core.txn_done("campaign", TxnResult(True, 11, ((), ())), now)


def test_no_leader_campaigns_with_the_next_epoch_in_the_same_txn() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    out = registered(core, epoch=4)
    campaign, watch = out
    assert isinstance(campaign, Transact) and campaign.purpose == "campaign" and watch == WatchFrom(11)
    puts = {op.key: op for op in campaign.success if isinstance(op, Put)}
    assert json.loads(puts[core.leader_key].value) == {"node": "n1", "epoch": 5}
    assert puts[core.leader_key].lease == 7 and puts[core.epoch_key].value == b"5"
    assert puts[core.epoch_key].lease == 0  # the epoch outlives every lease
    assert won(core) == [Lead(5)] and core.role is Role.LEADER


def test_a_lost_race_follows_the_winner() -> None:
    core = Coordinator("c", "n2", TTL, "i")
    registered(core)
    lost = TxnResult(False, 12, ((leader_kv("n1", 1),), (KeyValue(core.epoch_key, b"1", 11, 11, 1),), (),
                                 (KeyValue(core.member_key, b"{}", 10, 10, 1, 7),)))
    assert core.txn_done("campaign", lost, 0.0) == [Follow("n1", 1)]
    assert core.role is Role.FOLLOWER and not core.may_confirm(0.0)


def test_confirming_stops_at_the_margin_before_the_lease_and_resumes_on_renewal() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core, now=100.0)
    won(core, now=100.0)
    deadline = 100.0 + TTL - lease_margin(TTL)
    assert core.may_confirm(deadline - 0.001) and core.tick(deadline - 0.001) == []
    (stop,) = core.tick(deadline)
    assert isinstance(stop, StopConfirming) and not core.may_confirm(deadline)
    assert core.tick(deadline + 1) == []  # said once
    assert core.renewed(deadline + 0.5, TTL) == [Lead(1)] and core.may_confirm(deadline + 0.6)


def test_a_renewal_counts_from_when_it_was_sent() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core)
    won(core)
    core.renewed(3.0, TTL)  # sent at 3, answered later
    assert core.confirm_deadline == 3.0 + TTL - lease_margin(TTL)


def test_lost_lease_stops_confirming_and_joins_again() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core)
    won(core)
    out = core.lease_lost(1.0)
    assert isinstance(out[0], StopConfirming) and out[1:] == [Follow(None, 1), Grant(TTL)]
    assert core.role is Role.STARTING and not core.may_confirm(1.0)


def test_our_leader_key_deleted_while_leading_stops_then_campaigns() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core)
    won(core)
    stop, campaign = core.leader_changed(None, 1.0)
    assert isinstance(stop, StopConfirming) and isinstance(campaign, Transact)


def test_another_leader_seen_while_leading_stops_confirming() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core)
    won(core)
    own = KeyValue(core.leader_key, core._leader_value, 11, 11, 1, 7)
    assert core.leader_changed(own, 1.0) == []  # our own win, seen again through the watch
    out = core.leader_changed(leader_kv("n2", 2), 1.0)
    assert isinstance(out[0], StopConfirming) and out[1] == Follow("n2", 2) and core.epoch == 2


def test_only_in_sync_members_campaign() -> None:
    core = Coordinator("c", "n3", TTL, "i")
    refresh, watch = registered(core, epoch=2, in_sync=["n1", "n2"])
    # not in the set as last read: read it again (guarded by its revision) before giving up
    assert isinstance(refresh, Transact) and refresh.purpose == "refresh" and watch == WatchFrom(11)
    assert core.txn_done("refresh", TxnResult(True, 12, ()), 0.0) == [Follow(None, 2)]
    core2 = Coordinator("c", "n2", TTL, "i")
    (campaign, _) = registered(core2, epoch=2, in_sync=["n1", "n2"])
    assert isinstance(campaign, Transact) and campaign.purpose == "campaign"


def test_a_stale_view_of_the_in_sync_set_is_read_again_and_then_campaigns() -> None:
    core = Coordinator("c", "n3", TTL, "i")
    registered(core, epoch=2, in_sync=["n1", "n2"])
    fresh = KeyValue(core.in_sync_key, json.dumps(["n1", "n3"]).encode(), 4, 20, 2, 0)
    member = KeyValue(core.member_key, b"{}", 5, 5, 1, 7)
    out = core.txn_done("refresh", TxnResult(False, 21, ((), (), (fresh,), (member,))), 0.0)
    assert len(out) == 1 and isinstance(out[0], Transact) and out[0].purpose == "campaign"


def test_a_node_in_the_middle_of_a_copy_never_campaigns() -> None:
    core = Coordinator("c", "n2", TTL, "i")
    core.blocked = True
    assert registered(core, epoch=2, in_sync=["n1", "n2"]) == [Follow(None, 2), WatchFrom(11)]


def test_epoch_from_the_future_is_refused() -> None:
    core = Coordinator("c", "n1", TTL, "i", known_epoch=9)
    (fatal,) = registered(core, epoch=3)
    assert isinstance(fatal, Fatal) and "epoch 9" in fatal.message and "3" in fatal.message


@pytest.mark.parametrize("same_instance", [True, False])
def test_a_name_already_registered(same_instance: bool) -> None:
    core = Coordinator("c", "n1", TTL, "mine")
    core.start(0.0)
    core.lease_granted(7, TTL, 0.0)
    instance = "mine" if same_instance else "theirs"
    existing = KeyValue(core.member_key, json.dumps({"node": "n1", "instance": instance}).encode(), 5, 5, 1, 3)
    out = core.txn_done("register", TxnResult(False, 10, ((existing,),)), 0.0)
    if same_instance:
        assert out[0] == Revoke(3) and isinstance(out[1], Transact) and out[1].purpose == "register"
    else:
        (fatal,) = out
        assert isinstance(fatal, Fatal) and "'n1' is already a member" in fatal.message


def test_only_the_leader_writes_the_in_sync_set_guarded_by_its_own_record() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    registered(core)
    assert core.in_sync_update(["n1"]) is None
    won(core)
    txn = core.in_sync_update(["n2", "n1"])
    assert txn is not None and txn.compare[0].key == core.leader_key and txn.compare[0].target == "VALUE"
    assert txn.success == (Put(core.in_sync_key, b'["n1", "n2"]'),)


def test_a_campaign_etcd_did_not_answer_is_asked_again_while_there_is_no_leader() -> None:
    core = Coordinator("c", "n2", TTL, "i")
    registered(core, leader=leader_kv("n1", 1), epoch=1)
    (campaign,) = core.leader_changed(None, 10.0)  # the leader's key went
    assert isinstance(campaign, Transact)
    assert core.txn_failed("campaign", 10.0) == [] and core.next_wake() == 10.0 + RETRY_AFTER
    assert core.tick(10.0 + RETRY_AFTER - 0.01) == []
    (again,) = core.tick(10.0 + RETRY_AFTER)
    assert again == campaign and core.next_wake() == float("inf")
    # a leader seen meanwhile: no retry
    core.txn_failed("campaign", 11.0)
    core.leader_changed(leader_kv("n3", 2), 11.1)
    assert core.tick(12.0) == []


def test_a_registration_etcd_did_not_answer_is_asked_again() -> None:
    core = Coordinator("c", "n1", TTL, "i")
    core.start(0.0)
    (register,) = core.lease_granted(7, TTL, 0.0)
    core.txn_failed("register", 1.0)
    assert core.tick(1.0 + RETRY_AFTER) == [register]
