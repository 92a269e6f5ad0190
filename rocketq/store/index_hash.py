"""The index's key hash: RocketMQ's ``abs(String.hashCode(key))`` of ``topic#key``, for one key
or for many at once (the dispatcher hashes a run's keys in bulk).

Java's hash is taken over UTF-16 units; for ASCII keys that is the bytes, so a run of them is
hashed with array operations (or the compiled codec's ``index_hashes``), and only keys with
other characters go one by one.
"""

from __future__ import annotations

import numpy as np

from ..protocol import codec
from ..protocol.message import java_hash

_POWERS = np.zeros(0, dtype=np.uint64)


def index_key_hash(key: str) -> int:
    """RocketMQ's index hash: ``abs(String.hashCode(key))``, with MIN_VALUE mapped to 0."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def _key_hash(key: bytes) -> int:
    return index_key_hash(key.decode("utf-8", "replace"))


def _powers_of_31(n: int) -> np.ndarray:
    """``31**k mod 2**32`` for k in ``range(n)`` (or more), cached."""
    global _POWERS
    if len(_POWERS) < n:
        size = max(n, 2 * len(_POWERS), 256)
        _POWERS = np.array([pow(31, k, 1 << 32) for k in range(size)], dtype=np.uint64)
    return _POWERS


def index_key_hashes(keys: list[bytes] | list[str]) -> np.ndarray:
    """:func:`index_key_hash` of many keys (UTF-8 bytes or str) at once.

    Java's hash is a polynomial in 31 over the characters: for ASCII keys every byte is
    weighted by 31 to the power of its distance from its key's end and the weights are summed
    per key (``np.add.reduceat``), modulo 2**32, all keys in one pass. Keys with other
    characters (hashed over UTF-16 units) and empty keys go one by one.
    """
    # The dispatcher's keys are bytes already (a list is all bytes or all str).
    encoded = keys if not keys or type(keys[0]) is bytes else [k.encode() for k in keys]
    if codec.COMPILED:  # one C loop over the characters beats the array set-up
        return np.array(codec.index_hashes(encoded), dtype=np.int64)
    n = len(encoded)
    out = np.zeros(n, dtype=np.int64)
    if not n:
        return out
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    joined = b"".join(encoded)
    if joined:
        width = int(lengths.max())
        nonempty = lengths > 0
        if int(lengths.min()) == width:
            # Keys of one length (a topic's UNIQ_KEYs): one row each, one product with the
            # powers; uint64 products wrap modulo 2**64, which keeps them right modulo 2**32.
            rows = np.frombuffer(joined, dtype=np.uint8).reshape(n, width).astype(np.uint64)
            sums = (rows @ _powers_of_31(width)[width - 1::-1]) & 0xFFFFFFFF
        else:
            ends = np.cumsum(lengths)
            starts = ends - lengths
            chars = np.frombuffer(joined, dtype=np.uint8).astype(np.uint64)
            exponents = np.repeat(ends - 1, lengths) - np.arange(len(joined))
            weighted = chars * _powers_of_31(width)[exponents]
            sums = np.add.reduceat(weighted, starts[nonempty]) & 0xFFFFFFFF
        signed = sums.astype(np.int64)
        signed[signed >= 1 << 31] -= 1 << 32
        signed = np.abs(signed)
        signed[signed == 1 << 31] = 0  # abs(Integer.MIN_VALUE) stays negative in Java: use 0
        out[nonempty] = signed
    if not joined.isascii():
        for i, raw in enumerate(encoded):
            if not raw.isascii():
                out[i] = index_key_hash(raw.decode("utf-8", "replace"))
    return out
