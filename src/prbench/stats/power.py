"""Power analysis for accuracy comparisons: items and users needed, and the smallest resolvable difference.

The test is the two-sided Wald test on a mean of per-item scores, with a user-clustered (CR0)
standard error: for two RMs on the same items the score is the paired difference of their credits
(d = credit_A - credit_B), for one RM against chance it is the credit minus 0.5. This is the test
a 95% CI excluding 0 (or 0.5) amounts to, so "detectable" means "the CI will exclude it".

    n = (z_{1-alpha/2} + z_{power})^2 * sd^2 * deff / diff^2,   deff = 1 + (m_eff - 1) * icc

with sd the per-item standard deviation of the score under the alternative (paired binary credits:
sd^2 = discordance - diff^2, discordance = P(the two RMs disagree on an item); one RM:
sd^2 = p(1-p)), icc the intra-user correlation of the score and m_eff = sum(m_u^2) / sum(m_u) the
size-weighted items per user (the design effect of unequal clusters, Eldridge, Ashby & Kerry 2006,
Int. J. Epidemiol. 35:1292, eq. 1 with m_eff = (1 + cv^2) * mean m). The McNemar form (Connor 1987,
Biometrics 43:207) differs only in using the null variance in the alpha term; prbench's CIs are
plug-in, so the Wald form is the one whose prediction a run meets.

Why no library: statsmodels' `NormalIndPower` covers the unclustered one-sample z test only (and is
not a prbench dependency); no maintained package gives the clustered paired-proportion design, so the
closed form above (scipy for the normal quantiles) is used and checked against a Monte-Carlo
simulation in tests/test_power.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

from prbench.errors import PrbenchError
from prbench.stats.metrics import written_rows


@dataclass(frozen=True)
class Design:
    """What the number of items depends on, besides the difference itself."""

    sd: float
    """Per-item standard deviation of the score (paired difference, or credit) under the alternative."""
    icc: float = 0.0
    """Intra-user correlation of the score (0: items independent)."""
    items_per_user: float = 1.0
    """Size-weighted items per user, sum(m^2)/sum(m) (1: every item its own user)."""
    observed_diff: float | None = None
    """The difference a pilot observed (None for a design from assumptions)."""
    n_pilot: int | None = None
    """Items the pilot estimate rests on."""

    def __post_init__(self) -> None:
        """Refuse what no design can be (NaN and infinity compare false and would pass any later check)."""
        _finite_in("per-item sd", self.sd, 0.0, math.inf)
        _finite_in("--icc (the intra-user correlation)", self.icc, 0.0, 1.0)
        _finite_in("--items-per-user", self.items_per_user, 1.0, MAX_ITEMS)

    @property
    def design_effect(self) -> float:
        """Variance inflation of clustering by user (Kish): 1 + (m_eff - 1) * icc."""
        return 1.0 + max(self.items_per_user - 1.0, 0.0) * max(self.icc, 0.0)


@dataclass(frozen=True)
class SampleSize:
    """The answer of `items_needed`."""

    items: int
    """Pairs (items) to score with each RM."""
    users: int
    """Users those items come from, at `items_per_user` each."""
    design_effect: float
    diff: float
    power: float
    alpha: float
    design: Design

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "design": {**asdict(self.design), "design_effect": self.design.design_effect}}


MAX_ITEMS = 1e12  # more items than any benchmark holds: an answer above it means "not detectable"


def _finite_in(name: str, value: float, low: float, high: float) -> None:
    """One line naming the value when it is not a finite number in [low, high]."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise PrbenchError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")


def check_diff(diff: float) -> None:
    """A difference is a nonzero fraction of items (0.05 = 5 points), never more than 1 in size."""
    if not (isinstance(diff, (int, float)) and math.isfinite(diff) and 0 < abs(diff) <= 1):
        raise PrbenchError(f"--diff is a fraction of items (0.05 = 5 points): a nonzero number in [-1, 1], "
                           f"got {diff!r}")


def _z(power: float, alpha: float) -> float:
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise PrbenchError(f"power and alpha must lie strictly between 0 and 1, got power={power:g}, alpha={alpha:g}")
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def paired_design(discordance: float, diff: float, *, icc: float = 0.0, items_per_user: float = 1.0) -> Design:
    """Two RMs on the same items with 0/1 credits: sd^2 = discordance - diff^2 (McNemar's cells)."""
    check_diff(diff)
    if not 0 < discordance <= 1 or abs(diff) > discordance:
        raise PrbenchError(f"discordance must be in (0, 1] and at least |diff|, got discordance={discordance:g}, "
                           f"diff={diff:g}")
    return Design(sd=math.sqrt(discordance - diff**2), icc=icc, items_per_user=items_per_user)


def chance_design(accuracy: float, *, icc: float = 0.0, items_per_user: float = 1.0) -> Design:
    """One RM against chance (0.5): sd^2 = p(1-p) of its credits."""
    if not 0 < accuracy < 1:
        raise PrbenchError(f"accuracy must lie strictly between 0 and 1, got {accuracy:g}")
    return Design(sd=math.sqrt(accuracy * (1 - accuracy)), icc=icc, items_per_user=items_per_user)


def items_needed(diff: float, design: Design, *, power: float = 0.8, alpha: float = 0.05) -> SampleSize:
    """Items (and users) needed so that a difference `diff` is detected with `power` at level `alpha`."""
    check_diff(diff)
    z = _z(power, alpha)
    # diff**2 of a tiny diff underflows to 0: compare before dividing (the division would be 1/0 or overflow)
    if (z * design.sd) ** 2 * design.design_effect > MAX_ITEMS * diff**2:
        raise PrbenchError(f"a difference of {diff:g} needs more than {MAX_ITEMS:.0e} items: too small to detect")
    n = (z * design.sd) ** 2 * design.design_effect / diff**2
    items = max(math.ceil(n), 2)
    return SampleSize(items=items, users=math.ceil(items / max(design.items_per_user, 1.0)),
                      design_effect=design.design_effect, diff=abs(diff), power=power, alpha=alpha, design=design)


def min_detectable_difference(n: int, design: Design, *, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest difference `n` items detect with `power` at level `alpha` (the reverse of `items_needed`)."""
    if n < 2:
        raise PrbenchError(f"a difference needs at least 2 items, got {n}")
    return _z(power, alpha) * design.sd * math.sqrt(design.design_effect / n)


# -- designs from a pilot's per-item records -------------------------------------------------
def _scores(records_a: Iterable[Mapping[str, Any]], records_b: Iterable[Mapping[str, Any]] | None
            ) -> tuple[np.ndarray, list[str]]:
    """Per-item scores (paired difference, or credit - 0.5) on the items validly scored, with their user ids."""
    records_a, records_b = written_rows(records_a), None if records_b is None else written_rows(records_b)
    a = {r["id"]: r for r in records_a if r.get("credit") is not None}
    if records_b is None:
        ids = sorted(a)
        return np.array([a[i]["credit"] - 0.5 for i in ids], dtype=float), [_user(a[i]) for i in ids]
    b = {r["id"]: r["credit"] for r in records_b if r.get("credit") is not None}
    ids = sorted(a.keys() & b.keys())
    return np.array([a[i]["credit"] - b[i] for i in ids], dtype=float), [_user(a[i]) for i in ids]


def _user(rec: Mapping[str, Any]) -> str:
    """The item's user; an item without one is its own cluster."""
    return str(rec.get("user_id") or f"item:{rec['id']}")


def intra_user_correlation(scores: Sequence[float] | np.ndarray, users: Sequence[str]) -> tuple[float, float]:
    """(ICC, m_eff): one-way ANOVA estimator of the intra-user correlation (clipped to [0, 1]) and sum(m^2)/sum(m).

    ANOVA estimator with unequal groups (Donner 1986, Int. Stat. Rev. 54:67): n0 = (N - sum m^2/N)/(k-1).
    """
    groups: dict[str, list[float]] = defaultdict(list)
    for s, u in zip(scores, users, strict=True):
        groups[u].append(s)
    sizes = np.array([len(g) for g in groups.values()], dtype=float)
    n, k = sizes.sum(), len(sizes)
    m_eff = float((sizes**2).sum() / n) if n else 1.0
    if k < 2 or n <= k:
        return 0.0, m_eff
    grand = float(np.mean(scores))
    means = np.array([np.mean(g) for g in groups.values()])
    msb = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    msw = float(sum(((np.asarray(g) - m) ** 2).sum() for g, m in zip(groups.values(), means, strict=True)) / (n - k))
    n0 = (n - (sizes**2).sum() / n) / (k - 1)
    denom = msb + (n0 - 1) * msw
    icc = (msb - msw) / denom if denom > 0 else 0.0
    return float(min(max(icc, 0.0), 1.0)), m_eff


def pilot_design(records_a: Iterable[Mapping[str, Any]],
                 records_b: Iterable[Mapping[str, Any]] | None = None) -> Design:
    """A design from a pilot run's records (two runs on the same items: paired; one run: against chance).

    The sd, intra-user correlation and items per user are the observed ones; the observed difference is
    kept so `items_needed(design.observed_diff, design)` answers "how many to confirm what the pilot saw".
    """
    scores, users = _scores(records_a, records_b)
    if len(scores) < 2:
        raise PrbenchError(f"the pilot has {len(scores)} validly scored shared item(s); at least 2 are needed")
    icc, m_eff = intra_user_correlation(scores, users)
    return Design(sd=float(np.std(scores, ddof=1)), icc=icc, items_per_user=m_eff,
                  observed_diff=float(np.mean(scores)), n_pilot=len(scores))


def resolvable(records_a: Iterable[Mapping[str, Any]], records_b: Iterable[Mapping[str, Any]] | None = None, *,
               power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest difference a finished run (or pair of runs) resolves at its own n (None: under 2 items)."""
    try:
        design = pilot_design(records_a, records_b)
    except PrbenchError:
        return None
    if design.sd == 0:  # every score equal: the design says nothing about the spread; use the binary bound
        design = Design(sd=0.5, icc=design.icc, items_per_user=design.items_per_user, n_pilot=design.n_pilot)
    return min_detectable_difference(int(design.n_pilot or 0), design, power=power, alpha=alpha)
