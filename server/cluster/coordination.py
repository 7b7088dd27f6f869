"""Who leads the cluster: membership, the leader lease, the epoch and the in-sync set, decided
from etcd's answers.

Owner: one ``Coordinator`` per node, driven only by the cluster agent (``server/net/cluster_agent.py``),
which performs the requests it returns and feeds the answers back. Synchronous and
deterministic: ``now`` is an argument (a monotonic clock: every deadline here is this node's own),
and etcd's results come in as values (``etcd_model.py``). It never talks to etcd itself.

Keys, under ``/headrace/<cluster>/``:

- ``members/<node>``: this node's record, under its lease. Created only if absent, so a second
  process with the same name is refused. A record left by this node's own previous process (same
  ``instance``: the same data directory, after a kill -9, until its lease expires) has its lease
  revoked and is registered again, so a restarted leader does not wait out its old lease.
- ``leader``: ``{"node", "epoch"}``, under the leader's lease, created only if absent (txn). So
  there is at most one, and it goes when the leader's lease does.
- ``epoch``: the fencing token, a decimal. The campaign's txn writes epoch + 1 in the same
  transaction that creates ``leader``, guarded by the epoch's mod revision, so two nodes that
  both saw the leader gone cannot both win, nor win with the same epoch.
- ``in_sync``: the JSON list of nodes a leader may count for a confirm and that may campaign.
  Absent means nothing is tracked yet (every member may campaign). Only the leader writes it,
  guarded by its own leader record.

The lease rule: a leader confirms only while ``now < renewed_at + ttl - margin``, where
``renewed_at`` is when the last successful keep-alive was *sent*: etcd restarts the TTL when it
receives it, later, so this node's deadline always falls before etcd can expire the lease and let
another node win. Past the deadline the coordinator says ``StopConfirming`` once; a later
successful renewal (the lease was still alive) gives ``Lead`` again with the same epoch; a lost
lease makes it start over as a new member, and follow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from .etcd_model import Compare, Get, KeyValue, Put, RequestOp, TxnResult

__all__ = [
    "Coordinator", "Fatal", "Follow", "Grant", "Lead", "Notice", "Output", "Revoke", "Role", "StopConfirming",
    "Transact", "WatchFrom", "lease_margin",
]


class Role(Enum):
    STARTING = "starting"  # no lease or not registered yet
    FOLLOWER = "follower"
    LEADER = "leader"


# what the agent is asked to do
@dataclass(slots=True, frozen=True)
class Grant:
    ttl: int


@dataclass(slots=True, frozen=True)
class Transact:
    purpose: Literal["register", "campaign", "in_sync", "refresh"]
    compare: tuple[Compare, ...]
    success: tuple[RequestOp, ...]
    failure: tuple[RequestOp, ...]


@dataclass(slots=True, frozen=True)
class Revoke:
    """Give up a lease: this node's previous process's, so what it held goes at once."""

    lease: int


@dataclass(slots=True, frozen=True)
class WatchFrom:
    """Watch the leader key from this revision on (replaces any watch under way)."""

    revision: int


# what the agent tells the rest of the node
@dataclass(slots=True, frozen=True)
class Lead:
    epoch: int


@dataclass(slots=True, frozen=True)
class Follow:
    leader: str | None  # None: no leader at the moment (an election is under way)
    epoch: int


@dataclass(slots=True, frozen=True)
class StopConfirming:
    reason: str


@dataclass(slots=True, frozen=True)
class Fatal:
    """A configuration this node must not run with: one line for the operator."""

    message: str


Notice = Lead | Follow | StopConfirming | Fatal
Output = Grant | Transact | Revoke | WatchFrom | Notice


# after a transaction etcd could not answer, how long before the coordinator asks for it again
RETRY_AFTER = 0.25


def lease_margin(ttl: float) -> float:
    """How long before its lease could expire a leader stops confirming: a fifth of the TTL, at
    least half a second. It covers this node's own delays between checking and a confirm leaving
    (a busy event loop, a slow write), not clocks: every time compared here is this node's."""
    return max(ttl / 5, 0.5)


class Coordinator:
    def __init__(self, cluster: str, node: str, ttl: int, instance: str, known_epoch: int = 0,
                 address: dict[str, object] | None = None) -> None:
        self.prefix = f"/headrace/{cluster}/".encode()
        self.address = dict(address or {})  # where the others reach this node: host and ports
        self.blocked = False  # this node's files are not a whole copy (a copy under way): never campaign
        self.node = node
        self.ttl = ttl
        self.instance = instance
        self.known_epoch = known_epoch  # the highest epoch this node's data has seen
        self.role = Role.STARTING
        self.lease = 0
        self.renewed_at = 0.0
        self.epoch = 0
        self.leader: str | None = None
        self.in_sync: list[str] | None = None
        self.confirming = False
        self._epoch_mod = 0  # mod revision of the epoch key as last read (0: absent)
        self._in_sync_mod = 0
        self._leader_value = b""
        self._retry: str | None = None  # a transaction etcd did not answer, asked again at _retry_at
        self._retry_at = 0.0

    # keys
    @property
    def member_key(self) -> bytes:
        return self.prefix + b"members/" + self.node.encode()

    @property
    def members_prefix(self) -> bytes:
        return self.prefix + b"members/"

    @property
    def leader_key(self) -> bytes:
        return self.prefix + b"leader"

    @property
    def epoch_key(self) -> bytes:
        return self.prefix + b"epoch"

    @property
    def in_sync_key(self) -> bytes:
        return self.prefix + b"in_sync"

    # the lease
    @property
    def confirm_deadline(self) -> float:
        return self.renewed_at + self.ttl - lease_margin(self.ttl)

    def may_confirm(self, now: float) -> bool:
        return self.role is Role.LEADER and self.confirming and now < self.confirm_deadline

    def next_renewal(self) -> float:
        return self.renewed_at + self.ttl / 3

    def start(self, now: float) -> list[Output]:
        return [Grant(self.ttl)]

    def lease_granted(self, lease: int, ttl: int, sent_at: float) -> list[Output]:
        self.lease, self.ttl, self.renewed_at = lease, ttl, sent_at
        member = json.dumps({**self.address, "node": self.node, "instance": self.instance}).encode()
        return [self._register(Compare(self.member_key, "CREATE", 0), member)]

    def _register(self, condition: Compare, member: bytes) -> Transact:
        reads = (Get(self.leader_key), Get(self.epoch_key), Get(self.in_sync_key))
        return Transact("register", (condition,), (Put(self.member_key, member, self.lease), *reads),
                        (Get(self.member_key),))

    def renewed(self, sent_at: float, ttl: int) -> list[Output]:
        self.renewed_at, self.ttl = max(self.renewed_at, sent_at), ttl
        if self.role is Role.LEADER and not self.confirming:
            self.confirming = True
            return [Lead(self.epoch)]
        return []

    def lease_lost(self, now: float) -> list[Output]:
        """The keep-alive says the lease is gone: the member and any leader key went with it."""
        out: list[Output] = []
        if self.role is Role.LEADER and self.confirming:
            out.append(StopConfirming("lease expired"))
        self.role, self.lease, self.confirming, self.leader = Role.STARTING, 0, False, None
        out.append(Follow(None, self.epoch))
        out.append(Grant(self.ttl))
        return out

    def next_wake(self) -> float:
        """When ``tick`` has something to do: the confirm deadline, a transaction to retry."""
        wake = self.confirm_deadline if self.confirming else float("inf")
        return min(wake, self._retry_at) if self._retry else wake

    def tick(self, now: float) -> list[Output]:
        out: list[Output] = []
        if self.confirming and now >= self.confirm_deadline:
            self.confirming = False
            out.append(StopConfirming(f"lease not renewed for {now - self.renewed_at:.1f}s (ttl {self.ttl}s)"))
        if self._retry and now >= self._retry_at:
            purpose, self._retry = self._retry, None
            if purpose in ("campaign", "refresh") and self.role is Role.FOLLOWER and self.leader is None:
                out.extend(self._leader_seen(None, now))
            elif purpose == "register" and self.role is Role.STARTING and self.lease:
                out.extend(self.lease_granted(self.lease, self.ttl, self.renewed_at))
        return out

    def txn_failed(self, purpose: str, now: float) -> list[Output]:
        """etcd did not answer a transaction: ask for it again after ``RETRY_AFTER`` (as it will be
        then: a campaign only if there is still no leader, a registration only if still needed).
        Without this, a campaign lost to an etcd hiccup would wait for a leader event that never
        comes."""
        if purpose in ("campaign", "register", "refresh"):
            self._retry, self._retry_at = purpose, now + RETRY_AFTER
        return []

    # transactions' answers
    def txn_done(self, purpose: str, result: TxnResult, now: float) -> list[Output]:
        if purpose == "register":
            return self._registered(result, now)
        if purpose == "campaign":
            return self._campaigned(result, now)
        if purpose == "refresh":
            return self._refreshed(result, now)
        return []  # in_sync: read back through the watch of a later session

    def _registered(self, result: TxnResult, now: float) -> list[Output]:
        if not result.succeeded:
            existing = result.ranges[0][0] if result.ranges and result.ranges[0] else None
            if existing is None:  # gone between our txn and now: try again
                return self.lease_granted(self.lease, self.ttl, self.renewed_at)
            owner = _json(existing.value)
            if owner.get("instance") == self.instance and existing.lease != self.lease:
                # our own previous process's record (its data directory's lock says that process is
                # gone): revoke its lease, which takes its leader key too, and register again
                return [Revoke(existing.lease), *self.lease_granted(self.lease, self.ttl, self.renewed_at)]
            return [Fatal(f"node name {self.node!r} is already a member of this cluster (another "
                          f"running node registered it; give each node its own node_name)")]
        _, leader, epoch, in_sync = result.ranges
        self._note_epoch(epoch)
        self._note_in_sync(in_sync)
        fatal = self._check_epoch()
        if fatal:
            return [fatal]
        self.role = Role.FOLLOWER
        out = self._leader_seen(leader[0] if leader else None, now)
        return [*out, WatchFrom(result.revision + 1)]

    def _check_epoch(self) -> Fatal | None:
        if self.epoch < self.known_epoch:
            return Fatal(f"this node's data has epoch {self.known_epoch}, ahead of the cluster's "
                         f"{self.epoch} in etcd: was etcd reset? refusing to join")
        return None

    def _note_epoch(self, kvs: tuple[KeyValue, ...]) -> None:
        if kvs:
            self.epoch, self._epoch_mod = int(kvs[0].value or b"0"), kvs[0].mod_revision
        else:
            self._epoch_mod = 0

    def _note_in_sync(self, kvs: tuple[KeyValue, ...]) -> None:
        if kvs:
            names = _json_list(kvs[0].value)
            self.in_sync, self._in_sync_mod = names, kvs[0].mod_revision
        else:
            self.in_sync, self._in_sync_mod = None, 0

    def eligible(self) -> bool:
        """May this node campaign: in the in-sync set, or nothing is tracked yet."""
        return not self.blocked and (self.in_sync is None or self.node in self.in_sync)

    def _campaign(self) -> Transact:
        epoch = self.epoch + 1
        value = json.dumps({"node": self.node, "epoch": epoch}).encode()
        self._leader_value = value
        epoch_guard = (Compare(self.epoch_key, "MOD", self._epoch_mod) if self._epoch_mod
                       else Compare(self.epoch_key, "CREATE", 0))
        in_sync_guard = (Compare(self.in_sync_key, "MOD", self._in_sync_mod) if self._in_sync_mod
                         else Compare(self.in_sync_key, "CREATE", 0))
        return Transact(
            "campaign",
            (Compare(self.leader_key, "CREATE", 0), epoch_guard, in_sync_guard,
             Compare(self.member_key, "CREATE", 0, "GREATER")),
            (Put(self.leader_key, value, self.lease), Put(self.epoch_key, str(epoch).encode())),
            (Get(self.leader_key), Get(self.epoch_key), Get(self.in_sync_key), Get(self.member_key)),
        )

    def _refresh(self) -> Transact:
        """Succeeds (and changes nothing) when the in-sync set is as this node last read it;
        otherwise returns what a campaign's failure returns, to decide again."""
        guard = (Compare(self.in_sync_key, "MOD", self._in_sync_mod) if self._in_sync_mod
                 else Compare(self.in_sync_key, "CREATE", 0))
        return Transact("refresh", (guard,), (),
                        (Get(self.leader_key), Get(self.epoch_key), Get(self.in_sync_key), Get(self.member_key)))

    def _refreshed(self, result: TxnResult, now: float) -> list[Output]:
        if result.succeeded:
            return [Follow(None, self.epoch)]  # not in the in-sync set: wait for a leader
        leader, epoch, in_sync, member = result.ranges
        self._note_epoch(epoch)
        self._note_in_sync(in_sync)
        if not member:
            return []
        kv = leader[0] if leader else None
        if kv is None and not self.eligible():
            return [Follow(None, self.epoch)]
        return self._leader_seen(kv, now)

    def _campaigned(self, result: TxnResult, now: float) -> list[Output]:
        if result.succeeded:
            self.epoch = self.epoch + 1
            self.known_epoch = max(self.known_epoch, self.epoch)
            self.role, self.leader, self.confirming = Role.LEADER, self.node, now < self.confirm_deadline
            return [Lead(self.epoch)] if self.confirming else [StopConfirming("lease about to expire")]
        leader, epoch, in_sync, member = result.ranges
        self._note_epoch(epoch)
        self._note_in_sync(in_sync)
        if not member:  # our lease went meanwhile: the keep-alive will say so and we start over
            return []
        return self._leader_seen(leader[0] if leader else None, now)

    # the leader key, from the register txn or the watch
    def leader_changed(self, kv: KeyValue | None, now: float) -> list[Output]:
        if self.role is Role.STARTING:
            return []
        return self._leader_seen(kv, now)

    def _leader_seen(self, kv: KeyValue | None, now: float) -> list[Output]:
        if kv is None:
            out: list[Output] = []
            if self.role is Role.LEADER:  # our key went while we thought we led
                self.role, self.confirming = Role.FOLLOWER, False
                out.append(StopConfirming("leader key deleted"))
            self.leader = None
            if self.eligible() and self.lease:
                out.append(self._campaign())
            elif self.lease and not self.blocked:
                out.append(self._refresh())  # our in-sync view may be stale: read it before giving up
            else:
                out.append(Follow(None, self.epoch))
            return out
        record = _json(kv.value)
        leader, epoch = str(record.get("node", "")), _int(record.get("epoch"))
        self.epoch = max(self.epoch, epoch)
        if leader == self.node and kv.value == self._leader_value:
            return []  # our own win, seen again
        out = []
        if self.role is Role.LEADER and self.confirming:
            out.append(StopConfirming(f"{leader} leads with epoch {epoch}"))
        self.role, self.leader, self.confirming = Role.FOLLOWER, leader, False
        out.append(Follow(leader, epoch))
        return out

    def in_sync_written(self, names: list[str], revision: int) -> None:
        """This leader's in-sync write succeeded at ``revision``: a later campaign is guarded by it."""
        self.in_sync, self._in_sync_mod = list(names), revision

    def in_sync_update(self, names: list[str]) -> Transact | None:
        """The txn a leader runs to record its in-sync set; None when this node does not lead."""
        if self.role is not Role.LEADER:
            return None
        return Transact("in_sync", (Compare(self.leader_key, "VALUE", self._leader_value),),
                        (Put(self.in_sync_key, json.dumps(sorted(names)).encode()),), ())


def _json(raw: bytes) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _json_list(raw: bytes) -> list[str]:
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
