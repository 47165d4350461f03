"""Issue ids the way beads makes them: ``<prefix>-<base36 hash>``, children ``<parent>.<n>``.

The hash length grows with the number of issues so that the chance of a
collision stays under a bound (beads' adaptive length: the birthday bound
``1 - exp(-n^2 / (2 * 36^len)) <= 0.25``, length 3 to 8).
"""

from __future__ import annotations

__all__ = ["adaptive_length", "base36_hash", "hash_id", "child_id", "DEFAULT_PREFIX", "MIN_LENGTH", "MAX_LENGTH"]

# The prefix of a workspace that names none.
DEFAULT_PREFIX = "bd"

MIN_LENGTH = 3
MAX_LENGTH = 8
MAX_COLLISION_PROBABILITY = 0.25
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def collision_probability(n: int, length: int) -> float:
    """Birthday-bound probability that ``n`` random ids of ``length`` base36 chars collide."""
    import math  # here: a read never makes an id

    space = 36.0**length
    return 1.0 - math.exp(-(float(n) ** 2) / (2.0 * space))


def adaptive_length(n_issues: int) -> int:
    """The shortest hash length whose collision probability for ``n_issues`` stays in bound."""
    for length in range(MIN_LENGTH, MAX_LENGTH + 1):
        if collision_probability(n_issues, length) <= MAX_COLLISION_PROBABILITY:
            return length
    return MAX_LENGTH


def _base36(data: bytes) -> str:
    value = int.from_bytes(data, "big")
    out = []
    while value:
        value, rem = divmod(value, 36)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out)) or "0"


def hash_id(prefix: str, seed: str, length: int, nonce: int = 0) -> str:
    """A hash id for ``seed`` (title, creator, timestamp...) of ``length`` base36 chars."""
    encoded = base36_hash(seed, nonce).rjust(length, "0")
    return f"{prefix}-{encoded[:length]}"


def base36_hash(seed: str, nonce: int) -> str:
    """The base36 text ``hash_id`` pads and cuts (PostgreSQL's ``mesh_base36`` computes the same)."""
    import hashlib  # only a create needs it: every read would pay ~2 ms to import it

    return _base36(hashlib.sha256(f"{seed}|{nonce}".encode()).digest()[:12])


def child_id(parent_id: str, n: int) -> str:
    """The id of the ``n``-th child of ``parent_id``."""
    return f"{parent_id}.{n}"
