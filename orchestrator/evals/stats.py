"""The statistics of an evaluation report, exact and dependency-free.

- ``wilson``: the Wilson score interval of a proportion (resolved cases out of cases), which
  keeps its coverage at the small counts and the rates near 0 or 1 that evaluations have, where
  the normal approximation's interval leaves [0, 1] or collapses to a point.
- ``mcnemar_exact``: McNemar's exact test of two profiles run on the same cases: only the
  discordant cases count (``b`` resolved by the first profile alone, ``c`` by the second alone);
  under the null each is equally likely, so the two-sided p-value is a binomial tail with p = 1/2.
"""

from __future__ import annotations

import math

__all__ = ["mcnemar_exact", "wilson"]

_Z95 = 1.959963984540054


def wilson(successes: int, trials: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval (lower, upper) of ``successes`` out of ``trials`` (95% by
    default); (0.0, 1.0) for no trial."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes out of {trials} trials")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    lower = 0.0 if successes == 0 else max(0.0, centre - half)
    upper = 1.0 if successes == trials else min(1.0, centre + half)
    return lower, upper


def mcnemar_exact(b: int, c: int) -> float:
    """The two-sided exact p-value of McNemar's test for ``b`` and ``c`` discordant cases:
    twice the smaller binomial tail of Binomial(b + c, 1/2), at most 1; 1.0 without discordance."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts are never negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)
