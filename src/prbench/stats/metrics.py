"""Statistics for judging reward models (RMs) and how benchmark rankings transfer.

Three families live here, all pure functions over numpy arrays:

* pair accuracy of one RM (with seeded percentile-bootstrap CIs), micro/macro
  over groups, and a paired comparison of two RMs on the same items;
* rank agreement between a benchmark score per RM and a downstream score per
  RM (Spearman, Kendall tau-b, weighted tau, Pearson, NDCG, rank-biased
  overlap), with permutation p-values and item-bootstrap CIs;
* exact Best-of-N expectations from RM scores and grades of N candidates.

Every random choice takes an explicit ``seed`` so that reports are reproducible.
Invalid RM outputs (NaN/inf) are rejected here; callers count them separately.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import gammaln

__all__ = [
    "METRIC_DEFINITIONS",
    "RANK_METRICS",
    "accuracy_summary",
    "bootstrap_ci",
    "expected_best_of_k",
    "first_k_best",
    "kendall_tau_b",
    "macro_micro",
    "ndcg",
    "oracle_best_of_k",
    "pair_outcomes",
    "paired_comparison",
    "pearson",
    "random_of_k",
    "rank_agreement",
    "rank_agreement_bootstrap",
    "rbo",
    "rbo_scores",
    "spearman",
    "weighted_tau",
]

RANK_METRICS: tuple[str, ...] = ("spearman", "kendall_tau_b", "weighted_tau", "pearson", "ndcg", "rbo")

METRIC_DEFINITIONS: dict[str, str] = {
    "accuracy": "share of preference pairs where the RM scores chosen > rejected; exact ties count 0.5",
    "strict_accuracy": ("share of preference pairs where the RM scores chosen > rejected; ties count 0 (an RM-Bench "
                        "item counts its share of the 3x3 grid won strictly)"),
    "ties": "number of pairs where the RM gives chosen and rejected exactly equal scores",
    "micro_accuracy": "accuracy pooled over all items of all groups (ties 0.5)",
    "macro_accuracy": "unweighted mean of per-group accuracies; CI by bootstrap stratified within groups",
    "ci": "percentile bootstrap over items, 1000 resamples, 95% level, seeded",
    "paired_diff": "mean per-item credit of RM a minus RM b on the same items; CI by paired bootstrap of items",
    "mcnemar_p": "exact two-sided binomial McNemar test on discordant items; a tie (credit 0.5) counts as not correct",
    "spearman": "Spearman rank correlation between benchmark and downstream scores over RMs (average ranks for ties)",
    "kendall_tau_b": "Kendall tau-b (tie-corrected) between benchmark and downstream scores over RMs",
    "weighted_tau": (
        "scipy weightedtau: additive hyperbolic weights 1/(r+1), r = 0-based decreasing rank, "
        "averaged over ranking by (benchmark, downstream) and by (downstream, benchmark)"
    ),
    "pearson": "Pearson linear correlation between benchmark and downstream scores over RMs",
    "ndcg": (
        "NDCG of the RM ranking by benchmark score (descending, ties averaged), gain = downstream score minus "
        "its minimum, discount 1/log2(rank+1), all RMs unless k is set; 1.0 when all downstream scores are equal"
    ),
    "rbo": (
        "extrapolated rank-biased overlap (Webber et al. 2010, RBO_EXT) of the RM rankings by benchmark and by "
        "downstream score, persistence p=0.9, ties broken by RM id order"
    ),
    "p_value": "one-sided permutation p-value: share of 1000 seeded permutations of downstream scores with metric >= observed, (count+1)/(n+1)",
    "expected_best_of_k": "expected grade of the top-RM-scored candidate in a uniformly random k-subset of the N candidates; RM ties averaged",
    "first_k_best": "grade of the top-RM-scored candidate among the first k candidates; ties go to the lowest index",
    "oracle_best_of_k": "expected best grade in a uniformly random k-subset of the N candidates",
    "random_of_k": "mean grade of the N candidates (expected grade of a random pick)",
}


# --------------------------------------------------------------------------- helpers


def _finite_1d(values: Any, name: str) -> np.ndarray:
    """Coerce to a 1-D float array and refuse NaN/inf, which would silently bias every statistic."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; count invalid outputs before calling metrics")
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, names: str) -> None:
    """Paired statistics need one value per shared item/RM."""
    if a.shape != b.shape:
        raise ValueError(f"{names} must have the same length, got {a.shape[0]} and {b.shape[0]}")


def _check_ci(ci: float) -> None:
    """A CI level outside (0, 1) has no percentiles."""
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")


def _check_credits(credits: Any, name: str = "credits", shares: bool = False) -> np.ndarray:
    """Pair credits are the 1 / 0.5 / 0 outcomes of pair_outcomes; with `shares`, item credits under
    their rule (`item_credit`: a share in [0, 1], e.g. 1/3 for a three-way tie at the top of a
    best-of-4). Anything else is a caller bug (a raw score passed as a credit)."""
    arr = _finite_1d(credits, name)
    if shares:
        if not np.all((arr >= 0.0) & (arr <= 1.0)):
            raise ValueError(f"{name} must lie in [0, 1] (an item's share under its rule)")
    elif not np.all(np.isin(arr, (0.0, 0.5, 1.0))):
        raise ValueError(f"{name} must only contain 0, 0.5 or 1")
    return arr


def _percentiles(samples: np.ndarray, ci: float) -> tuple[float | None, float | None]:
    """Percentile interval ignoring NaN replicates (e.g. a constant resample has no correlation)."""
    samples = np.asarray(samples, dtype=float)
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return None, None
    alpha = (1.0 - ci) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _quiet(fn: Callable[[], float]) -> float:
    """scipy warns on constant input and returns NaN; NaN is the answer we want, without the noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn())


# --------------------------------------------------------------------------- pair accuracy


def pair_outcomes(scores_chosen: Any, scores_rejected: Any) -> np.ndarray:
    """Per-pair credit: 1.0 if chosen > rejected, 0.5 on an exact tie, else 0.0.

    NaN/inf scores raise ValueError: an invalid RM output is neither right nor wrong,
    so callers must count and drop it before scoring.
    """
    chosen = _finite_1d(scores_chosen, "scores_chosen")
    rejected = _finite_1d(scores_rejected, "scores_rejected")
    _same_length(chosen, rejected, "scores_chosen and scores_rejected")
    return np.where(chosen > rejected, 1.0, np.where(chosen == rejected, 0.5, 0.0))


def bootstrap_ci(
    values: Any,
    stat: Callable[..., Any] = np.mean,
    *,
    seed: int,
    n_boot: int = 1000,
    ci: float = 0.95,
    vectorized: bool = True,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of ``stat`` over items resampled with replacement.

    With ``vectorized=True`` ``stat`` must accept ``axis=1`` on a 2-D array of
    resamples (numpy reductions do); resamples are drawn in memory-bounded blocks.
    Returns (None, None) when every replicate is NaN.
    """
    arr = _finite_1d(values, "values")
    if arr.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")
    _check_ci(ci)
    rng = np.random.default_rng(seed)
    n = arr.size
    if not vectorized:
        reps = np.array([float(stat(arr[rng.integers(0, n, n)])) for _ in range(n_boot)])
        return _percentiles(reps, ci)
    block = max(1, min(n_boot, 2_000_000 // n))
    parts = []
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        idx = rng.integers(0, n, size=(size, n))
        parts.append(np.asarray(stat(arr[idx], axis=1), dtype=float))
    return _percentiles(np.concatenate(parts), ci)


def accuracy_summary(credits: Any, *, seed: int, n_boot: int = 1000, ci: float = 0.95,
                     shares: bool = False, strict: Any = None) -> dict[str, Any]:
    """Accuracy (ties 0.5), strict accuracy (ties 0), tie count and a bootstrap CI of accuracy.

    For zero items every statistic is None rather than a misleading 0. `shares`: item credits
    under a multi-response rule (any value in [0, 1]) instead of pair outcomes; `strict`: each
    item's strict credit (`strict_credits`) where it is not simply credit == 1.
    """
    arr = _check_credits(credits, shares=shares)
    n = int(arr.size)
    if n == 0:
        return {"n": 0, "accuracy": None, "strict_accuracy": None, "ties": 0, "ci_low": None, "ci_high": None}
    low, high = bootstrap_ci(arr, seed=seed, n_boot=n_boot, ci=ci)
    return {
        "n": n,
        "accuracy": float(arr.mean()),
        "strict_accuracy": float(np.mean(arr == 1.0) if strict is None else np.mean(np.asarray(strict, dtype=float))),
        "ties": int(np.sum(arr == 0.5)),
        "ci_low": low,
        "ci_high": high,
    }


def _boot_means(arr: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """n_boot bootstrap means of one group, drawn in memory-bounded blocks."""
    n = arr.size
    block = max(1, min(n_boot, 2_000_000 // n))
    parts = []
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        parts.append(arr[rng.integers(0, n, size=(size, n))].mean(axis=1))
    return np.concatenate(parts)


def macro_micro(
    credits_by_group: Mapping[str, Any], seed: int, *, n_boot: int = 1000, ci: float = 0.95, shares: bool = False
) -> dict[str, Any]:
    """Micro accuracy (pool all items) and macro accuracy (mean of group accuracies), each with a CI.

    Micro weights users/groups by their size; macro gives every group one vote, so a
    few large groups cannot hide failure on small ones. The macro CI resamples items
    within each group (stratified), keeping group sizes fixed. Empty groups are
    reported with accuracy None and left out of the macro mean.
    """
    _check_ci(ci)
    groups = {name: _check_credits(vals, f"credits_by_group[{name!r}]", shares)
              for name, vals in credits_by_group.items()}
    per_group = {
        name: {"n": int(arr.size), "accuracy": float(arr.mean()) if arr.size else None} for name, arr in groups.items()
    }
    nonempty = [arr for arr in groups.values() if arr.size]
    if not nonempty:
        empty = {"accuracy": None, "ci_low": None, "ci_high": None}
        return {"micro": {**empty, "n": 0}, "macro": {**empty, "n_groups": 0}, "groups": per_group}
    pooled = np.concatenate(nonempty)
    micro_low, micro_high = bootstrap_ci(pooled, seed=seed, n_boot=n_boot, ci=ci)
    rng = np.random.default_rng([seed, 1])
    macro_reps = np.mean([_boot_means(arr, rng, n_boot) for arr in nonempty], axis=0)
    macro_low, macro_high = _percentiles(macro_reps, ci)
    return {
        "micro": {"accuracy": float(pooled.mean()), "ci_low": micro_low, "ci_high": micro_high, "n": int(pooled.size)},
        "macro": {
            "accuracy": float(np.mean([arr.mean() for arr in nonempty])),
            "ci_low": macro_low,
            "ci_high": macro_high,
            "n_groups": len(nonempty),
        },
        "groups": per_group,
    }


def paired_comparison(
    credits_a: Any, credits_b: Any, *, seed: int, n_boot: int = 1000, ci: float = 0.95
) -> dict[str, Any]:
    """Compare two RMs on the same items: mean difference a - b, paired bootstrap CI, exact McNemar.

    Pairing removes item difficulty from the comparison. The bootstrap resamples item
    indices jointly (equivalently, the per-item differences). McNemar rule: an item is
    "correct" only with credit 1; a tie (0.5) counts as not correct. The p-value is the
    exact two-sided binomial test of n_a_only vs n_b_only at 1/2 (1.0 with no discordant items).
    """
    a = _check_credits(credits_a, "credits_a")
    b = _check_credits(credits_b, "credits_b")
    _same_length(a, b, "credits_a and credits_b")
    if a.size == 0:
        raise ValueError("paired_comparison needs at least one item")
    diff = a - b
    low, high = bootstrap_ci(diff, seed=seed, n_boot=n_boot, ci=ci)
    a_ok, b_ok = a == 1.0, b == 1.0
    n_a_only = int(np.sum(a_ok & ~b_ok))
    n_b_only = int(np.sum(~a_ok & b_ok))
    n_disc = n_a_only + n_b_only
    p = float(stats.binomtest(n_a_only, n_disc, 0.5).pvalue) if n_disc else 1.0
    return {
        "n": int(a.size),
        "diff": float(diff.mean()),
        "ci_low": low,
        "ci_high": high,
        "mcnemar_p": p,
        "n_discordant": n_disc,
        "n_a_only": n_a_only,
        "n_b_only": n_b_only,
    }


# --------------------------------------------------------------------------- rank agreement


def _xy(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate a pair of per-RM score vectors (finite, same length, at least two RMs)."""
    xa, ya = _finite_1d(x, "x"), _finite_1d(y, "y")
    _same_length(xa, ya, "x and y")
    if xa.size < 2:
        raise ValueError("rank agreement needs at least two RMs")
    return xa, ya


def spearman(x: Any, y: Any) -> float:
    """Spearman rho (scipy.stats.spearmanr); NaN if either vector is constant."""
    xa, ya = _xy(x, y)
    return _quiet(lambda: stats.spearmanr(xa, ya).statistic)


def kendall_tau_b(x: Any, y: Any) -> float:
    """Kendall tau-b (scipy.stats.kendalltau, variant 'b'); NaN if either vector is constant."""
    xa, ya = _xy(x, y)
    return _quiet(lambda: stats.kendalltau(xa, ya, variant="b").statistic)


def pearson(x: Any, y: Any) -> float:
    """Pearson r (scipy.stats.pearsonr); NaN if either vector is constant."""
    xa, ya = _xy(x, y)
    return _quiet(lambda: stats.pearsonr(xa, ya).statistic)


def weighted_tau(
    x: Any, y: Any, weigher: str | Callable[[int], float] = "hyperbolic", *, exp_base: float = 0.9
) -> float:
    """Weighted Kendall tau (scipy.stats.weightedtau) so swaps among the top RMs count most.

    Uses scipy's defaults ``rank=True, additive=True``: the value is the average of the
    index computed with importance rank = decreasing lexicographic rank by (x, y) and by
    (y, x); the weight of an exchange is the sum of the weights of the two ranks (0-based).
    ``weigher``: "hyperbolic" (default) w(r) = 1/(r+1); "exp" w(r) = exp_base**r; or a callable.
    """
    xa, ya = _xy(x, y)
    fn: Callable[[int], float] | None
    if weigher == "hyperbolic":
        fn = None  # scipy's own default, 1/(r+1)
    elif weigher == "exp":
        if not 0.0 < exp_base < 1.0:
            raise ValueError(f"exp_base must be in (0, 1), got {exp_base}")

        def exp_weight(r: int) -> float:
            return exp_base**r

        fn = exp_weight
    elif callable(weigher):
        fn = weigher
    else:
        raise ValueError(f"unknown weigher {weigher!r}; use 'hyperbolic', 'exp' or a callable")
    return _quiet(lambda: stats.weightedtau(xa, ya, rank=True, weigher=fn, additive=True).statistic)


def _discounts(n: int, k: int | None) -> np.ndarray:
    """1/log2(rank+1) for ranks 1..n, zero past the cut-off k."""
    disc = 1.0 / np.log2(np.arange(2, n + 2, dtype=float))
    if k is not None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        disc[k:] = 0.0
    return disc


def ndcg(benchmark_scores: Any, downstream_scores: Any, k: int | None = None) -> float:
    """NDCG of the RM ranking induced by benchmark scores, judged by downstream scores.

    Rank RMs by benchmark score (descending); gain_i = y_i - min(y) so the worst RM
    downstream earns nothing; discount 1/log2(rank+1); normalised by the DCG of ranking
    by y itself; only the first k ranks count when k is given. RMs tied on benchmark
    score share their ranks: each gets the mean gain of its tie group (the expected DCG
    under random tie-breaking, as sklearn.metrics.ndcg_score does). If all downstream
    scores are equal the ideal DCG is 0 and any ranking is perfect: returns 1.0.
    """
    xa, ya = _xy(benchmark_scores, downstream_scores)
    gain = ya - ya.min()
    disc = _discounts(xa.size, k)
    ideal = float(np.sum(np.sort(gain)[::-1] * disc))
    if ideal == 0.0:
        return 1.0
    _, inverse, counts = np.unique(-xa, return_inverse=True, return_counts=True)
    group_gain = np.bincount(inverse, weights=gain) / counts
    ends = np.cumsum(counts)
    cum_disc = np.concatenate(([0.0], np.cumsum(disc)))
    group_disc = cum_disc[ends] - cum_disc[ends - counts]
    # min(): summing discounts in another order can overshoot 1 by one ulp
    return min(1.0, float(np.sum(group_gain * group_disc) / ideal))


def _prefix_overlaps(short: Sequence[Hashable], long: Sequence[Hashable]) -> np.ndarray:
    """X_d for d = 1..len(long): items shared by short[:d] and long[:d] (short stops at its end)."""
    seen_s: set[Hashable] = set()
    seen_l: set[Hashable] = set()
    overlap = 0
    out = np.empty(len(long), dtype=float)
    for d in range(len(long)):
        item_l = long[d]
        if d < len(short):
            item_s = short[d]
            if item_s == item_l:
                overlap += 1
            else:
                overlap += (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
        else:
            overlap += item_l in seen_s
        seen_l.add(item_l)
        out[d] = overlap
    return out


def rbo(list_a: Sequence[Hashable], list_b: Sequence[Hashable], p: float = 0.9, mode: str = "ext") -> float:
    """Rank-biased overlap (Webber, Moffat & Zobel 2010) of two rankings without ties.

    RBO = (1-p) * sum_{d>=1} p^(d-1) * X_d / d, where X_d = |A[:d] & B[:d]|: a top-weighted
    overlap in which the first d ranks carry weight 1 - p^d. The lists are prefixes of
    unknown infinite rankings (lengths may differ; s = shorter, l = longer, X_l counts
    seen items only), so:

    * ``"min"``: RBO_MIN, lower bound assuming no unseen item ever matches
      (paper eq. 11, with the shorter list's unseen items never matching).
    * ``"res"``: RBO_RES, the most that unseen items could add: every unseen item matches
      as early as possible (full overlap from depth f = s + l - X_l). min..min+res bounds RBO.
    * ``"ext"`` (default): RBO_EXT, point estimate extrapolating the agreement seen at the
      shorter list's end (paper eq. 32); equals 1 for identical lists and 0 for disjoint ones.

    Requires 0 < p < 1, non-empty lists and no repeated id within a list.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if mode not in ("ext", "min", "res"):
        raise ValueError(f"mode must be 'ext', 'min' or 'res', got {mode!r}")
    for name, lst in (("list_a", list_a), ("list_b", list_b)):
        if len(lst) == 0:
            raise ValueError(f"{name} is empty")
        if len(set(lst)) != len(lst):
            raise ValueError(f"{name} repeats an id; RBO here takes rankings without ties")
    short, long = (list_a, list_b) if len(list_a) <= len(list_b) else (list_b, list_a)
    s, l = len(short), len(long)
    x = _prefix_overlaps(short, long)
    depth = np.arange(1, l + 1, dtype=float)
    pw = p**depth
    x_s, x_l = x[s - 1], x[l - 1]
    if mode == "ext":
        tail_fill = np.where(depth > s, x_s * (depth - s) / (s * depth), 0.0)
        body = np.sum((x / depth + tail_fill) * pw)
        return float((1 - p) / p * body + ((x_l - x_s) / l + x_s / s) * p**l)
    if mode == "min":
        body = np.sum((x - x_l) * pw / depth)
        return float((1 - p) / p * (body - x_l * math.log1p(-p)))
    return _rbo_residual(s, l, x_l, p)


def _rbo_residual(s: int, l: int, x_l: float, p: float) -> float:
    """RBO_MAX - RBO_MIN: per-depth gap in X_d/d between the best and worst completions.

    Gap per depth d: 0 for d <= s; (d-s)/d for s < d <= l; (2d-s-l)/d for l < d < f;
    (d-X_l)/d for d >= f = s + l - X_l, where both completed prefixes coincide.
    """
    f = s + l - int(x_l)
    d = np.arange(1, f, dtype=float)  # depths 1..f-1, exact sums
    gap = np.where(d <= s, 0.0, np.where(d <= l, d - s, 2 * d - s - l)) / d
    head = np.sum(gap * p**d)
    # sum_{d>=f} p^d = p^f/(1-p);  sum_{d>=f} p^d/d = -ln(1-p) - sum_{d<f} p^d/d
    tail_geo = p**f / (1 - p)
    tail_harm = -math.log1p(-p) - np.sum(p**d / d)
    return float((1 - p) / p * (head + tail_geo - x_l * tail_harm))


def _ranking(scores: np.ndarray, ids: Sequence[Hashable]) -> list[Hashable]:
    """ids ordered by score descending; ties keep the order of ``ids`` (stable sort)."""
    order = np.argsort(-scores, kind="stable")
    return [ids[i] for i in order]


def rbo_scores(x: Any, y: Any, ids: Sequence[Hashable], p: float = 0.9, mode: str = "ext") -> float:
    """RBO between the RM ranking by x (descending) and by y (descending).

    RBO has no notion of ties here: tied scores keep the order of ``ids``, so ties in
    both x and y in the same ids order count as agreement; document that when reporting.
    """
    xa, ya = _xy(x, y)
    if len(ids) != xa.size:
        raise ValueError(f"ids has {len(ids)} entries for {xa.size} RMs")
    return rbo(_ranking(xa, ids), _ranking(ya, ids), p=p, mode=mode)


def _metric_fns(
    ids: Sequence[Hashable], p: float, k: int | None
) -> dict[str, Callable[[np.ndarray, np.ndarray], float]]:
    """The rank-agreement metrics as f(x, y) -> float, in RANK_METRICS order."""
    return {
        "spearman": spearman,
        "kendall_tau_b": kendall_tau_b,
        "weighted_tau": weighted_tau,
        "pearson": pearson,
        "ndcg": lambda x, y: ndcg(x, y, k=k),
        "rbo": lambda x, y: rbo_scores(x, y, ids, p=p),
    }


def _check_ids(ids: Sequence[Hashable], n: int) -> None:
    """One distinct id per RM, so rankings of ids are well defined."""
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} RMs")
    if len(set(ids)) != n:
        raise ValueError("ids must be distinct")


def rank_agreement(
    x: Any,
    y: Any,
    *,
    ids: Sequence[Hashable],
    seed: int,
    n_perm: int = 1000,
    p: float = 0.9,
    k: int | None = None,
) -> dict[str, dict[str, float | None]]:
    """Point value and one-sided permutation p-value of every rank-agreement metric.

    x: benchmark score per RM, y: downstream score per RM. The null shuffles y over RMs
    (same permutations for all metrics); p_value = (1 + #{perm: metric >= observed}) /
    (1 + n_perm), testing for agreement better than chance. ci_low/ci_high are None here:
    CIs need per-item data, see rank_agreement_bootstrap. A NaN value gets p_value None.
    """
    xa, ya = _xy(x, y)
    _check_ids(ids, xa.size)
    if n_perm < 1:
        raise ValueError("n_perm must be >= 1")
    fns = _metric_fns(ids, p, k)
    observed = {name: fn(xa, ya) for name, fn in fns.items()}
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(ya) for _ in range(n_perm)]
    out: dict[str, dict[str, float | None]] = {}
    for name, fn in fns.items():
        obs = observed[name]
        if not np.isfinite(obs):
            out[name] = {"value": obs, "ci_low": None, "ci_high": None, "p_value": None}
            continue
        null = np.array([fn(xa, yp) for yp in perms])
        hits = int(np.sum(null >= obs - 1e-12))  # tolerance: the identity permutation must count as a hit
        out[name] = {"value": obs, "ci_low": None, "ci_high": None, "p_value": (hits + 1) / (n_perm + 1)}
    return out


def _finite_2d(values: Any, name: str) -> np.ndarray:
    """Per-item matrices are (n_rms, n_items), finite, with at least one item."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be 2-D (n_rms, n_items) with n_items >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _resample_weights(n: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap resample of n items expressed as per-item weights (counts / n)."""
    return np.bincount(rng.integers(0, n, n), minlength=n) / n


def rank_agreement_bootstrap(
    item_matrix_x: Any,
    item_matrix_y: Any,
    *,
    ids: Sequence[Hashable],
    seed: int,
    n_boot: int = 1000,
    joint: bool = False,
    ci: float = 0.95,
    p: float = 0.9,
    k: int | None = None,
) -> dict[str, dict[str, float | None]]:
    """Item-bootstrap CIs of every rank-agreement metric between per-RM means.

    item_matrix_x: (n_rms, n_items_x) benchmark credits; item_matrix_y: (n_rms, n_items_y)
    downstream scores. Each replicate resamples items with replacement, recomputes per-RM
    means and every metric; the uncertainty is that of finite benchmark/downstream item
    sets, not of which RMs were chosen. joint=True uses the same item indices for both
    (benchmark and downstream share items, so n_items must match); otherwise the two
    sets are resampled independently. Replicates where a metric is NaN are dropped.
    Returns {metric: {value, ci_low, ci_high}} with value from the full data.
    """
    mx = _finite_2d(item_matrix_x, "item_matrix_x")
    my = _finite_2d(item_matrix_y, "item_matrix_y")
    if mx.shape[0] != my.shape[0]:
        raise ValueError(f"item matrices have {mx.shape[0]} and {my.shape[0]} RMs")
    if mx.shape[0] < 2:
        raise ValueError("rank agreement needs at least two RMs")
    if joint and mx.shape[1] != my.shape[1]:
        raise ValueError("joint=True needs the same items in both matrices (equal n_items)")
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")
    _check_ci(ci)
    _check_ids(ids, mx.shape[0])
    fns = _metric_fns(ids, p, k)
    rng = np.random.default_rng(seed)
    reps = {name: np.empty(n_boot) for name in fns}
    for b in range(n_boot):
        wx = _resample_weights(mx.shape[1], rng)
        wy = wx if joint else _resample_weights(my.shape[1], rng)
        xb, yb = mx @ wx, my @ wy
        for name, fn in fns.items():
            reps[name][b] = fn(xb, yb)
    x_full, y_full = mx.mean(axis=1), my.mean(axis=1)
    out: dict[str, dict[str, float | None]] = {}
    for name, fn in fns.items():
        low, high = _percentiles(reps[name], ci)
        out[name] = {"value": fn(x_full, y_full), "ci_low": low, "ci_high": high}
    return out


# --------------------------------------------------------------------------- Best-of-N


def _rg(r: Any, g: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate RM scores and grades of the N candidates of one item, and 1 <= k <= N."""
    ra, ga = _finite_1d(r, "r"), _finite_1d(g, "g")
    _same_length(ra, ga, "r and g")
    if ra.size == 0:
        raise ValueError("need at least one candidate")
    if not 1 <= k <= ra.size:
        raise ValueError(f"k must be in [1, {ra.size}], got {k}")
    return ra, ga


def _max_of_subset_weights(n: int, k: int) -> np.ndarray:
    """P(sorted position i, 0-based ascending, is the max of a random k-subset) = C(i, k-1) / C(n, k)."""
    i = np.arange(n, dtype=float)
    w = np.zeros(n)
    ok = i >= k - 1
    io = i[ok]
    log_w = (gammaln(io + 1) - gammaln(k) - gammaln(io - k + 2)) - (
        gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    )
    w[ok] = np.exp(log_w)
    return w / w.sum()


def expected_best_of_k(r: Any, g: Any, k: int) -> float:
    """Exact expected grade of the top-RM candidate in a uniformly random k-subset of N candidates.

    Avoids Monte-Carlo noise in Best-of-N curves: sort by RM score; the candidate at
    ascending position i is the subset maximum with probability C(i, k-1)/C(N, k).
    RM ties: tied candidates each take the mean grade of their tie group, which equals
    breaking ties uniformly at random. O(N log N).
    """
    ra, ga = _rg(r, g, k)
    order = np.argsort(ra, kind="stable")
    rs, gs = ra[order], ga[order]
    _, inverse, counts = np.unique(rs, return_inverse=True, return_counts=True)
    tied_mean = (np.bincount(inverse, weights=gs) / counts)[inverse]
    return float(np.dot(_max_of_subset_weights(ra.size, k), tied_mean))


def first_k_best(r: Any, g: Any, k: int) -> float:
    """Grade of the top-RM candidate among the first k (one fixed draw, as in the paper); ties -> lowest index."""
    ra, ga = _rg(r, g, k)
    return float(ga[int(np.argmax(ra[:k]))])


def oracle_best_of_k(g: Any, k: int) -> float:
    """Expected best grade in a random k-subset: the ceiling any RM could reach at this k."""
    return expected_best_of_k(g, g, k)


def random_of_k(g: Any) -> float:
    """Expected grade of a random candidate (the floor); equals the mean grade for any k."""
    ga = _finite_1d(g, "g")
    if ga.size == 0:
        raise ValueError("need at least one candidate")
    return float(ga.mean())


# -- items with several chosen or rejected responses --------------------------------------
# An item (`item` in its pair records) is scored by its format's rule, from the per-pair records
# the scoring core wrote (pointwise scores where there are, else per-pair credits):
# - "best-of-n" (RewardBench 2): the chosen response must score highest; when it ties with
#   others at the top the item earns 1/(number tied), as `reroll_and_score_dataset` in
#   allenai/reward-bench rewardbench/utils.py does; below any rejected one: 0.
# - "ties" (RewardBench 2 Ties): 1 if every chosen response beats every rejected one (worst
#   chosen > best rejected, `_compute_prompt_stats`), else 0.
# - "matrix" (RM-Bench): the mean over the chosen x rejected style grid of strict wins
#   (chosen > rejected; a tie is 0, as RM-Bench's `compute_accuracy`).
# - "beats-all" (RMB best-of-N): as "ties", the best answer must beat every loser.
# - "strict" (JudgeBench, RMB pairs): one pair, no half credit: chosen > rejected; a judge's
#   verdicts win when those for chosen outnumber those for rejected (JudgeBench's rule over
#   its two orders, ScalerLab/JudgeBench utils/metrics.py L63-76).
# - "pair": each pair is its own item, credit as `pair_outcomes` (ties 0.5).
ITEM_RULES = ("pair", "best-of-n", "ties", "matrix", "strict", "beats-all")


def _pair_scores(rec: dict[str, Any]) -> tuple[float, float] | None:
    c, r = rec.get("score_chosen"), rec.get("score_rejected")
    return (float(c), float(r)) if c is not None and r is not None else None


def _strict_win(rec: dict[str, Any], scores: tuple[float, float] | None) -> bool:
    """One pair won outright: by scores, else by a majority of the judge's sides (a tie side counts 0)."""
    if scores is not None:
        return scores[0] > scores[1]
    sides = rec.get("sides")
    if sides:
        return sum((s == "chosen") - (s == "rejected") for s in sides) > 0
    return rec["credit"] == 1.0


def strict_credits(items: Sequence[dict[str, Any]]) -> list[float]:
    """Per item, its share of pairs won strictly: an RM-Bench grid's credit is already that share;
    under any other rule an item counts when its credit is whole (ties and shared tops count 0)."""
    return [float(r["credit"]) if r.get("rule") == "matrix" else float(r["credit"] == 1.0) for r in items]


def item_credit(rule: str, pairs: Sequence[dict[str, Any]]) -> float | None:
    """Credit of one item from its pair records; None when any pair is invalid."""
    if any(p.get("credit") is None for p in pairs):
        return None
    maybe_scores = [_pair_scores(p) for p in pairs]
    scores = [s for s in maybe_scores if s is not None]
    pointwise = len(scores) == len(maybe_scores)
    if rule == "pair":
        return float(np.mean([p["credit"] for p in pairs]))
    if rule == "matrix":
        wins = [s[0] > s[1] for s in scores] if pointwise else [p["credit"] == 1.0 for p in pairs]
        return float(np.mean(wins))
    if rule == "strict":
        if len(pairs) != 1:
            raise ValueError(f"a strict item is one pair, got {len(pairs)}")
        return float(_strict_win(pairs[0], maybe_scores[0]))
    if rule in ("ties", "beats-all"):
        if pointwise:
            return float(min(s[0] for s in scores) > max(s[1] for s in scores))
        return float(all(p["credit"] == 1.0 for p in pairs))
    if rule == "best-of-n":
        if pointwise:
            chosen = {s[0] for s in scores}
            if len(chosen) != 1:
                raise ValueError("best-of-n item with more than one chosen response")
            c = chosen.pop()
            rej = [s[1] for s in scores]
            return 0.0 if any(r > c for r in rej) else 1.0 / (1 + sum(r == c for r in rej))
        credits = [p["credit"] for p in pairs]
        return 0.0 if any(c == 0.0 for c in credits) else 1.0 / (1 + sum(c == 0.5 for c in credits))
    raise ValueError(f"unknown item rule {rule!r} (use {', '.join(ITEM_RULES)})")


def _longer(pairs: Sequence[dict[str, Any]]) -> str | None:
    sides = {p.get("longer") for p in pairs}
    return sides.pop() if len(sides) == 1 else "equal"  # mixed: no single side is longer


def written_rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    """Records in their written shape (examples.jsonl's objects), what the counting here reads: a typed record
    (`prbench.store.records`) gives back the keys its line had; a written object passes as it is."""
    return [r.model_dump(exclude_unset=True) if hasattr(r, "model_dump") else r for r in records]


def collapse_items(records: Sequence[Any]) -> list[dict[str, Any]]:
    """Per-pair records (written or typed) -> one record per item (pairs without an `item` pass through unchanged).

    The item record carries `id` (the item id), `category`, `credit` by the item's rule,
    `longer` (a side only when every pair agrees), `n_pairs` and `rule`; `invalid` when a pair was.
    """
    records = written_rows(records)
    if not any("item" in r for r in records):
        return list(records)
    groups: dict[str, list[dict[str, Any]]] = {}
    order: list[tuple[str, str]] = []
    for r in records:
        key = r.get("item")
        if key is None:
            order.append(("pair", str(r["id"])))
            groups[f"\0{r['id']}"] = [r]
            continue
        if key not in groups:
            order.append(("item", key))
            groups[key] = []
        groups[key].append(r)
    out = []
    for kind, key in order:
        if kind == "pair":
            out.append(groups[f"\0{key}"][0])
            continue
        pairs = groups[key]
        rule = pairs[0].get("rule") or "pair"
        credit = item_credit(rule, pairs)
        rec: dict[str, Any] = {"id": key, "category": pairs[0]["category"], "credit": credit, "rule": rule,
                               "n_pairs": len(pairs), "longer": _longer(pairs), "truncated": False}
        if pairs[0].get("user_id"):
            rec["user_id"] = pairs[0]["user_id"]
        if credit is None:
            rec["invalid"] = next((p.get("invalid") for p in pairs if p.get("invalid")), "invalid pair")
        out.append(rec)
    return out


# -- rater agreement ---------------------------------------------------------------------------
# Cohen's kappa and Krippendorff's alpha are a few lines of counting; scikit-learn (`cohen_kappa_score`) is only
# a dev dependency and the `krippendorff` package is not one at all, so both are computed here and checked
# against them (and against Krippendorff's worked example) in tests/test_agreement.py.
def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cohen's (1960) kappa of two raters over the same units: (p_o - p_e) / (1 - p_e); None when undefined
    (no units, or both raters constant on one and the same category)."""
    if len(a) != len(b):
        raise ValueError("two raters must rate the same units")
    if not a:
        return None
    cats = sorted({*a, *b}, key=str)
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    p_e = sum((sum(x == c for x in a) / n) * (sum(y == c for y in b) / n) for c in cats)
    return None if p_e == 1 else (p_o - p_e) / (1 - p_e)


def krippendorff_alpha(units: Sequence[Sequence[Any]]) -> float | None:
    """Krippendorff's alpha, nominal, over units each rated by any number of raters (None = missing):
    1 - D_o / D_e from the coincidence matrix (Krippendorff 2011, "Computing Krippendorff's alpha-reliability").
    Units with fewer than two ratings are not pairable and drop out; None when undefined."""
    coincide: dict[tuple[Any, Any], float] = {}
    for unit in units:
        vals = [v for v in unit if v is not None]
        m = len(vals)
        if m < 2:
            continue
        for i, x in enumerate(vals):
            for j, y in enumerate(vals):
                if i != j:
                    coincide[(x, y)] = coincide.get((x, y), 0.0) + 1 / (m - 1)
    n_c: dict[Any, float] = {}
    for (x, _), w in coincide.items():
        n_c[x] = n_c.get(x, 0.0) + w
    n = float(sum(n_c.values()))
    if n <= 1:
        return None
    d_o = sum(w for (x, y), w in coincide.items() if x != y) / n
    d_e = sum(n_c[x] * n_c[y] for x in n_c for y in n_c if x != y) / (n * (n - 1))
    return None if d_e == 0 else 1 - d_o / d_e
