"""Recovery at start: the message store's live records go back into their queues and delayed
exchanges before any client connects.

Past a queue's resident window the rest of its messages stay where they are in the store's
segments: ``Queue.add_recovered_spilled`` hands their runs (``persistence/store_pages.py``) to the
queue's spill backing, which pages them in from there as the queue drains. No message object and
no copy per entry: copying them into spill files was most of a large backlog's restart.

Records nothing will ever ack (a queue or delayed exchange that did not survive: exclusive, deleted
while down, ...) are killed in the log, or they would pin disk forever and come back the day a
queue of that name is declared again. On a full disk that kill record waits in the store, which
writes it once there is room: the broker still starts.
"""

from __future__ import annotations

import logging

from headrace.persistence import DropQueue, MessageStore, StoreOp, Undelay
from headrace.queues import Message, Queue
from headrace.server.amqp.properties import quick_props
from headrace.server.broker import Broker

__all__ = ["recover"]

log = logging.getLogger("headrace.storage")


def _props_info(props_raw: bytes) -> tuple[int | None, int | None]:
    """(priority, expiration ms) of a recovered message's properties; an expiration that is not
    a number of milliseconds counts as none."""
    _, priority, expiration, _ = quick_props(props_raw)
    return priority, int(expiration) if expiration and expiration.isdigit() else None


def recover(store: MessageStore, broker: Broker, now: float) -> int:
    """Load ``store`` into ``broker``'s queues and delayed exchanges (definitions already loaded;
    delayed messages go back into the schedule's bucket files by due time, a batch at a time,
    those due already too: ``DelayedMessages.add_recovered``); returns messages."""
    recovered = store.recover()
    if recovered.truncated_bytes:
        log.warning("message store: truncated %d bytes of torn tail", recovered.truncated_bytes)
    broker.set_next_message_id(recovered.next_message_id)
    count = 0
    orphans: list[StoreOp] = []
    for (vname, qname), messages in recovered.queues.items():
        vhost = broker.vhosts.get(vname)
        queue = vhost.queues.get(qname) if vhost is not None else None
        if not isinstance(queue, Queue) or not queue.durable:  # the store holds classic queues' messages
            log.warning("message store: %d messages for unknown queue '%s' in vhost '%s' dropped",
                        len(messages), qname, vname)
            orphans.append(DropQueue(vname, qname))
            continue
        total, loaded = len(messages), 0
        while loaded < total and not queue.spills_next():  # the resident window, as messages
            rm = messages[loaded]
            priority, expiration = _props_info(rm.props_raw)
            message = Message(rm.message_id, rm.exchange, rm.routing_key, rm.props_raw, rm.body, True,
                              priority or 0, expiration, None, rm.timestamp_ms / 1000)
            broker.delivery.recover(queue, message, redelivered=rm.redelivered,
                                    delivery_count=rm.delivery_count)
            loaded += 1
        if loaded < total:  # the rest goes to the spill as it lies in the store
            loaded += broker.delivery.recover_spilled(queue, messages.rows(loaded), _props_info)
        count += loaded
    for batch in recovered.delayed.batches():  # a chunk of a segment's live Delay records a time
        for (vname, ename, elen), rows in batch.items():
            vhost = broker.vhosts.get(vname)
            exchange = vhost.exchanges.get(ename) if vhost is not None else None
            if vhost is None or exchange is None or not exchange.durable \
                    or ename not in vhost.delayed_exchanges:
                orphans += [Undelay(row[1]) for row in rows]
                continue
            vhost.delayed.add_recovered(ename, elen, rows, now=now)
            count += len(rows)
    if orphans:
        try:
            store.write_and_sync(orphans)
        except OSError as exc:  # disk full at start: the flusher writes them once it has room
            log.warning("message store: cannot record dropped orphans yet: %s", exc)
    if count:
        log.info("message store: recovered %d messages", count)
    return count
