"""The statistics of an evaluation report, exact and dependency-free.

- ``wilson``: the Wilson score interval of a proportion (resolved cases out of cases), which
  keeps its coverage at the small counts and the rates near 0 or 1 that evaluations have, where
  the normal approximation's interval leaves [0, 1] or collapses to a point.
- ``mcnemar_exact``: McNemar's exact test of two profiles run on the same cases: only the
  discordant cases count (``b`` resolved by the first profile alone, ``c`` by the second alone);
  under the null each is equally likely, so the two-sided p-value is a binomial tail with p = 1/2.
- ``pass_at_k`` and ``pass_hat_k``: per case, the chance that at least one (pass@k) or all (pass^k)
  of k runs resolve, estimated without bias from the n runs made.
- ``mean_interval``: a mean of per-case scores with its clustered normal interval, never narrower
  than the Wilson interval of as many cases.
- ``sign_flip_exact``: the paired comparison of two arms over every trial: an exact sign-flip
  permutation test of per-case differences (McNemar's exact test when each case has one run).
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["mcnemar_exact", "mean_interval", "pass_at_k", "pass_hat_k", "sign_flip_exact", "wilson"]

_Z95 = 1.959963984540054


def wilson(successes: float, trials: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval (lower, upper) of ``successes`` out of ``trials`` (95% by
    default; ``successes`` may be a mean times the trials); (0.0, 1.0) for no trial."""
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


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k for one case (Chen et al. 2021): the chance that at least
    one of ``k`` runs drawn from the ``n`` made (``c`` of them resolved) resolves, 1 - C(n-c, k)/C(n, k)."""
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one case (tau-bench, Yao et al. 2024): the chance that all of ``k`` runs drawn
    from the ``n`` made resolve, C(c, k)/C(n, k): how reliably the arm resolves it."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_counts(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"{c} resolved of {n} runs, k={k}")


def mean_interval(values: list[float], z: float = _Z95) -> tuple[float, float, float]:
    """(mean, lower, upper) of per-case scores in [0, 1]: the mean with the normal interval of its
    standard error across cases (the clustered standard error of an eval whose cases each have
    several runs: Miller 2024, "Adding Error Bars to Evals"), widened to at least the Wilson
    interval of as many cases at that rate: with few cases that all agree the standard error is 0,
    and an interval of one point would claim a certainty that four cases cannot give. None of
    them: (0, 0, 1)."""
    if not values:
        return 0.0, 0.0, 1.0
    n = len(values)
    mean = sum(values) / n
    low, high = wilson(mean * n, n, z)
    if n >= 2:
        variance = sum((v - mean) ** 2 for v in values) / (n - 1)
        half = z * math.sqrt(variance / n)
        low, high = min(low, max(0.0, mean - half)), max(high, min(1.0, mean + half))
    return mean, low, high


def sign_flip_exact(differences: list[Fraction | int]) -> float:
    """The two-sided exact p-value of the paired sign-flip (permutation) test of per-case
    differences between two arms (each case's resolved rate in one arm minus the other's): under
    the null the sign of each case's difference is a fair coin, so the p-value is the share of the
    2^m sign assignments (m nonzero differences) whose sum is at least as far from zero as the one
    observed. With one trial per case the differences are -1, 0 or 1 and this is McNemar's exact
    test. Computed exactly (rational differences, the distribution of sums built case by case)."""
    values = [Fraction(d) for d in differences if d != 0]
    if not values:
        return 1.0
    observed = abs(sum(values))
    sums: dict[Fraction, int] = {Fraction(0): 1}
    for value in values:
        grown: dict[Fraction, int] = {}
        for total, count in sums.items():
            for signed in (total + value, total - value):
                grown[signed] = grown.get(signed, 0) + count
        sums = grown
    extreme = sum(count for total, count in sums.items() if abs(total) >= observed)
    return min(1.0, extreme / 2 ** len(values))
