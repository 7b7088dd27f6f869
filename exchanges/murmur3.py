"""MurmurHash3 x86_32 (Austin Appleby's public-domain hash), in pure Python.

Why it is here: RabbitMQ's stream clients (Java's ``HashRoutingStrategy``, Go's
``HashRoutingMurmurStrategy``) pick a super stream's partition for a routing key as this hash of
the key's UTF-8 bytes with seed ``STREAM_SEED``, unsigned, modulo the partition count. The super
stream exchange routes other keys by the same rule, so an AMQP 0-9-1 publisher and a stream client
put a key in the same partition. No state; a key of a few dozen bytes hashes in a few
microseconds, and the exchange caches its answers per key.
"""

from __future__ import annotations

__all__ = ["STREAM_SEED", "murmur3_32"]

STREAM_SEED = 104729  # the stream clients' seed (HashUtils.MURMUR3 in the Java client)
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """The 32-bit hash of ``data``, as an unsigned int."""
    h = seed & _MASK
    length = len(data)
    tail_at = length - (length & 3)
    for i in range(0, tail_at, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK
    rest = length & 3
    if rest:
        k = int.from_bytes(data[tail_at:], "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h
