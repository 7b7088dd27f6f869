"""Queue slots of the message store's index: each durable queue holding live messages as a small int.

Rule 1: ``QueueSlots`` owns the queue -> slot map, the slot -> queue list and each slot's live
message count; its one user is the ``StoreIndex`` (``store_index.py``) that holds it. Rule 2: a
slot exists exactly while its queue holds a live message, so a dropped or drained queue costs
nothing and its number is reused.

Why slots: the index keeps one ``array('I')`` entry per message for its queue, so a queue name costs
nothing per message (``index_chunks.py``); slot 0 is ``DEAD``.
"""

from __future__ import annotations

from .store_ops import QKey

__all__ = ["QueueSlots"]


class QueueSlots:
    """Queue keys <-> slot numbers, with the live messages each slot holds.

    ``ids`` and ``live`` are read directly by the index's per-message paths (an ack looks its queue
    up once per message); only the methods here change them."""

    __slots__ = ("ids", "keys", "live", "_free")

    def __init__(self) -> None:
        self.ids: dict[QKey, int] = {}  # queue -> slot, for queues holding live messages
        self.keys: list[QKey | None] = [None]  # slot -> queue (None: free); slot 0 is DEAD
        self.live: list[int] = [0]  # slot -> live messages
        self._free: list[int] = []

    @classmethod
    def restore(cls, keys: list[QKey | None], live: list[int]) -> QueueSlots:
        """Slots as a checkpoint (``store_checkpoint.py``) saved ``keys`` and ``live``."""
        slots = cls()
        slots.keys, slots.live = keys, live
        slots.ids = {key: n for n, key in enumerate(keys) if key is not None}
        slots._free = [n for n, key in enumerate(keys) if key is None and n]
        return slots

    def take(self, key: QKey) -> int:
        """The slot of ``key`` (a new one if it holds nothing yet); counts one more message."""
        slot = self.ids.get(key)
        if slot is None:
            if self._free:
                slot = self._free.pop()
                self.keys[slot] = key
            else:
                slot = len(self.keys)
                self.keys.append(key)
                self.live.append(0)
            self.ids[key] = slot
        self.live[slot] += 1
        return slot

    def release(self, slot: int, n: int = 1) -> None:
        """``n`` fewer messages in ``slot``; the slot is freed with its last one."""
        left = self.live[slot] - n
        self.live[slot] = left
        if not left:
            key = self.keys[slot]
            assert key is not None
            del self.ids[key]
            self.keys[slot] = None
            self._free.append(slot)

    def name(self, slot: int) -> str:
        """The queue name of a live slot."""
        key = self.keys[slot]
        assert key is not None
        return key[1]
