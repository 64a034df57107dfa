"""Tests for prbench.stats.metrics: against scipy/sklearn, brute force, and hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from prbench.stats import metrics as m

# --------------------------------------------------------------------------- pair accuracy


def test_pair_outcomes_credit_values():
    out = m.pair_outcomes([2.0, 1.0, 0.5, -1.0], [1.0, 1.0, 0.7, -3.0])
    assert out.tolist() == [1.0, 0.5, 0.0, 1.0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pair_outcomes_rejects_non_finite(bad):
    with pytest.raises(ValueError):
        m.pair_outcomes([1.0, bad], [0.0, 0.0])
    with pytest.raises(ValueError):
        m.pair_outcomes([1.0, 0.0], [0.0, bad])


def test_pair_outcomes_length_mismatch():
    with pytest.raises(ValueError):
        m.pair_outcomes([1.0, 2.0], [0.0])


def test_accuracy_summary_values_and_determinism():
    credits = np.array([1, 1, 0.5, 0, 1, 0.5, 1, 0], dtype=float)
    a = m.accuracy_summary(credits, seed=3, n_boot=500)
    b = m.accuracy_summary(credits, seed=3, n_boot=500)
    assert a == b
    assert a["n"] == 8
    assert a["accuracy"] == pytest.approx(5 / 8)
    assert a["strict_accuracy"] == pytest.approx(4 / 8)
    assert a["ties"] == 2
    assert a["ci_low"] <= a["accuracy"] <= a["ci_high"]


def test_accuracy_summary_empty():
    out = m.accuracy_summary([], seed=0)
    assert out["n"] == 0
    assert all(out[key] is None for key in ("accuracy", "strict_accuracy", "ci_low", "ci_high"))


def test_accuracy_summary_rejects_bad_credits():
    with pytest.raises(ValueError):
        m.accuracy_summary([1.0, 0.3], seed=0)
    with pytest.raises(ValueError):
        m.accuracy_summary([1.0, np.nan], seed=0)


def test_ci_shrinks_with_more_items():
    rng = np.random.default_rng(0)
    small = (rng.random(50) < 0.7).astype(float)
    large = (rng.random(5000) < 0.7).astype(float)
    s = m.accuracy_summary(small, seed=1)
    big = m.accuracy_summary(large, seed=1)
    assert big["ci_high"] - big["ci_low"] < (s["ci_high"] - s["ci_low"]) / 3


def test_bootstrap_ci_deterministic_and_generic():
    values = np.random.default_rng(5).normal(size=200)
    assert m.bootstrap_ci(values, seed=9) == m.bootstrap_ci(values, seed=9)
    low, high = m.bootstrap_ci(values, np.median, seed=9, n_boot=300)
    assert low < np.median(values) < high
    lo2, hi2 = m.bootstrap_ci(values, lambda v: float(np.median(v)), seed=9, n_boot=300, vectorized=False)
    assert lo2 < np.median(values) < hi2
    # percentile bootstrap of the mean is close to the normal interval
    se = values.std(ddof=1) / math.sqrt(values.size)
    low, high = m.bootstrap_ci(values, seed=1, n_boot=4000)
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_bootstrap_ci_errors():
    with pytest.raises(ValueError):
        m.bootstrap_ci([], seed=0)
    with pytest.raises(ValueError):
        m.bootstrap_ci([1.0, np.nan], seed=0)
    with pytest.raises(ValueError):
        m.bootstrap_ci([1.0, 2.0], seed=0, ci=1.5)


def test_macro_micro():
    groups = {"u1": [1.0] * 90 + [0.0] * 10, "u2": [0.0, 0.0, 1.0, 0.5], "empty": []}
    out = m.macro_micro(groups, seed=0, n_boot=400)
    assert out["micro"]["accuracy"] == pytest.approx((90 + 1.5) / 104)
    assert out["micro"]["n"] == 104
    assert out["macro"]["accuracy"] == pytest.approx((0.9 + 1.5 / 4) / 2)
    assert out["macro"]["n_groups"] == 2
    assert out["groups"]["empty"] == {"n": 0, "accuracy": None}
    for part in ("micro", "macro"):
        assert out[part]["ci_low"] <= out[part]["accuracy"] <= out[part]["ci_high"]
    assert m.macro_micro(groups, 0, n_boot=400) == out


def test_macro_ci_is_stratified():
    # Two groups each of constant credits: stratified resampling leaves the macro mean fixed.
    out = m.macro_micro({"a": [1.0] * 5, "b": [0.0] * 50}, seed=0, n_boot=200)
    assert out["macro"]["ci_low"] == out["macro"]["ci_high"] == pytest.approx(0.5)
    assert out["micro"]["ci_low"] < out["micro"]["ci_high"]


# --------------------------------------------------------------------------- paired comparison


def test_paired_comparison_known_mcnemar():
    # 12 items a right & b wrong, 3 items b right & a wrong, 2 ties for a (not correct), 20 both right.
    a = [1.0] * 12 + [0.0] * 3 + [0.5] * 2 + [1.0] * 20
    b = [0.0] * 12 + [1.0] * 3 + [1.0] * 2 + [1.0] * 20
    out = m.paired_comparison(a, b, seed=0, n_boot=500)
    assert out["n_a_only"] == 12
    assert out["n_b_only"] == 5
    assert out["n_discordant"] == 17
    assert out["mcnemar_p"] == pytest.approx(stats.binomtest(12, 17, 0.5).pvalue)
    assert out["diff"] == pytest.approx((12 - 3 - 1) / 37)
    assert out["diff"] > 0
    assert out["ci_low"] <= out["diff"] <= out["ci_high"]
    swapped = m.paired_comparison(b, a, seed=0, n_boot=500)
    assert swapped["diff"] == pytest.approx(-out["diff"])
    assert swapped["mcnemar_p"] == pytest.approx(out["mcnemar_p"])


def test_paired_comparison_no_discordance():
    out = m.paired_comparison([1.0, 0.0, 0.5], [1.0, 0.0, 0.5], seed=0, n_boot=100)
    assert out["diff"] == 0.0
    assert out["mcnemar_p"] == 1.0
    assert out["n_discordant"] == 0


def test_paired_comparison_errors():
    with pytest.raises(ValueError):
        m.paired_comparison([1.0], [1.0, 0.0], seed=0)
    with pytest.raises(ValueError):
        m.paired_comparison([np.nan], [1.0], seed=0)


# --------------------------------------------------------------------------- correlations

XS = np.array([0.61, 0.72, 0.55, 0.80, 0.66, 0.72, 0.59, 0.70])
YS = np.array([3.1, 4.0, 2.2, 4.4, 3.0, 3.9, 3.3, 2.9])


def test_correlations_match_scipy():
    assert m.spearman(XS, YS) == pytest.approx(stats.spearmanr(XS, YS).statistic)
    assert m.kendall_tau_b(XS, YS) == pytest.approx(stats.kendalltau(XS, YS, variant="b").statistic)
    assert m.pearson(XS, YS) == pytest.approx(stats.pearsonr(XS, YS).statistic)
    assert m.weighted_tau(XS, YS) == pytest.approx(stats.weightedtau(XS, YS).statistic)
    exp = m.weighted_tau(XS, YS, "exp", exp_base=0.5)
    assert exp == pytest.approx(stats.weightedtau(XS, YS, weigher=lambda r: 0.5**r).statistic)
    for fn in (m.spearman, m.kendall_tau_b, m.pearson, m.weighted_tau):
        assert isinstance(fn(XS, YS), float)


def test_correlation_edge_cases():
    assert math.isnan(m.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    with pytest.raises(ValueError):
        m.spearman([1.0], [2.0])
    with pytest.raises(ValueError):
        m.pearson([1.0, np.nan], [2.0, 3.0])
    with pytest.raises(ValueError):
        m.weighted_tau(XS, YS, "cubic")


def test_weighted_tau_is_top_weighted():
    x = np.arange(10, 0, -1, dtype=float)
    top_swap, bottom_swap = x.copy(), x.copy()
    top_swap[[0, 1]] = top_swap[[1, 0]]
    bottom_swap[[8, 9]] = bottom_swap[[9, 8]]
    assert m.weighted_tau(x, top_swap) < m.weighted_tau(x, bottom_swap) < 1.0


# --------------------------------------------------------------------------- NDCG


@pytest.mark.parametrize("k", [None, 1, 3, 5])
def test_ndcg_matches_sklearn(k):
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(2, 12))
        x = rng.integers(0, 5, n).astype(float)  # benchmark ties on purpose
        y = rng.random(n) * 3
        expected = ndcg_score((y - y.min())[None, :], x[None, :], k=k)
        assert m.ndcg(x, y, k=k) == pytest.approx(expected)


def test_ndcg_properties():
    y = np.array([0.1, 0.9, 0.5, 0.3])
    assert m.ndcg(y, y) == pytest.approx(1.0)
    assert m.ndcg(y * 2 + 1, y) == pytest.approx(1.0)  # only the order of x matters
    assert m.ndcg(-y, y) < 1.0
    assert m.ndcg([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) == 1.0  # ideal DCG 0
    # shift invariance of y: the gain is y - min(y)
    assert m.ndcg(XS, YS) == pytest.approx(m.ndcg(XS, YS + 100.0))
    with pytest.raises(ValueError):
        m.ndcg(XS, YS, k=0)


# --------------------------------------------------------------------------- RBO


def rbo_truncated(a, b, p, depth):
    """Definition: (1-p) * sum_{d=1..depth} p^(d-1) |A[:d] & B[:d]| / d."""
    return (1 - p) * sum(p ** (d - 1) * len(set(a[:d]) & set(b[:d])) / d for d in range(1, depth + 1))


def rbo_ext_even(a, b, p):
    """The paper's RBO_EXT for equal-length lists."""
    k = len(a)
    x = [len(set(a[:d]) & set(b[:d])) for d in range(1, k + 1)]
    return x[-1] / k * p**k + (1 - p) / p * sum(x[d - 1] / d * p**d for d in range(1, k + 1))


def pad(lst, prefix, n=400):
    """Complete a ranking with fresh ids that never match anything."""
    return list(lst) + [f"{prefix}{i}" for i in range(n)]


def max_completion(short, long, n=400):
    """Completion in which unseen items match as early as possible (attains RBO_MIN + RBO_RES)."""
    s_ext = list(short) + [item for item in long if item not in set(short)]
    l_ext = list(long) + [item for item in short if item not in set(long)]
    fresh = [f"z{i}" for i in range(n)]
    return s_ext + fresh, l_ext + fresh


def test_rbo_identical_and_disjoint():
    for p in (0.5, 0.9, 0.98):
        assert m.rbo(list("abcde"), list("abcde"), p=p) == pytest.approx(1.0)
        assert m.rbo(list("abc"), list("xyz"), p=p) == 0.0
        assert m.rbo(list("abc"), list("xyz"), p=p, mode="min") == pytest.approx(0.0)
    # identical prefixes: min + res = 1 (unseen items could all agree)
    assert m.rbo(list("abc"), list("abc"), mode="min") + m.rbo(list("abc"), list("abc"), mode="res") == pytest.approx(
        1.0
    )


def test_rbo_hand_computed():
    p = 0.9
    a, b = list("abcd"), list("bacd")
    # X = 0, 2, 3, 4 -> truncated RBO at depth 4
    by_hand = (1 - p) * (0 / 1 + p * 2 / 2 + p**2 * 3 / 3 + p**3 * 4 / 4)
    assert rbo_truncated(a, b, p, 4) == pytest.approx(by_hand)
    ext = 4 / 4 * p**4 + (1 - p) / p * (p**2 * 2 / 2 + p**3 * 3 / 3 + p**4 * 4 / 4)
    assert m.rbo(a, b, p=p) == pytest.approx(ext)
    assert m.rbo(a, b, p=p) == pytest.approx(rbo_ext_even(a, b, p))
    # [a, b] vs [b, c], p = 0.5: X = 0, 1
    assert m.rbo(list("ab"), list("bc"), p=0.5) == pytest.approx(0.5 * 0.25 + 1 * (0.5 * 0.25))


@given(
    st.permutations(list(range(8))),
    st.permutations(list(range(3, 11))),
    st.integers(1, 8),
    st.integers(1, 8),
    st.sampled_from([0.3, 0.7, 0.9]),
)
@settings(max_examples=60, deadline=None)
def test_rbo_bounds_against_definition(pa, pb, la, lb, p):
    a, b = pa[:la], pb[:lb]
    lo = m.rbo(a, b, p=p, mode="min")
    res = m.rbo(a, b, p=p, mode="res")
    ext = m.rbo(a, b, p=p, mode="ext")
    assert m.rbo(b, a, p=p) == pytest.approx(ext)
    # RBO_MIN: unseen items never match
    assert lo == pytest.approx(rbo_truncated(pad(a, "x"), pad(b, "y"), p, 400), abs=1e-9)
    # RBO_MIN + RBO_RES: unseen items match as early as possible
    s, l_ = (a, b) if len(a) <= len(b) else (b, a)
    hs, hl = max_completion(s, l_)
    assert lo + res == pytest.approx(rbo_truncated(hs, hl, p, 400), abs=1e-9)
    assert lo - 1e-12 <= ext <= lo + res + 1e-12
    assert 0.0 <= ext <= 1.0 + 1e-12
    if len(a) == len(b):
        assert ext == pytest.approx(rbo_ext_even(a, b, p))


def test_rbo_top_weighted():
    base = list("abcdefgh")
    top = list("bacdefgh")
    bottom = list("abcdefhg")
    assert m.rbo(base, top) < m.rbo(base, bottom) < 1.0


def test_rbo_argument_checks():
    for p in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            m.rbo(list("ab"), list("ab"), p=p)
    with pytest.raises(ValueError):
        m.rbo(list("ab"), list("ab"), mode="max")
    with pytest.raises(ValueError):
        m.rbo([], list("ab"))
    with pytest.raises(ValueError):
        m.rbo(list("aab"), list("ab"))


def test_rbo_scores_ranks_descending():
    ids = ["r1", "r2", "r3", "r4"]
    x = [0.1, 0.4, 0.3, 0.2]
    y = [1.0, 4.0, 3.0, 2.0]
    assert m.rbo_scores(x, y, ids) == pytest.approx(1.0)
    assert m.rbo_scores(x, [-v for v in y], ids) == pytest.approx(
        m.rbo(["r2", "r3", "r4", "r1"], ["r1", "r4", "r3", "r2"])
    )


# --------------------------------------------------------------------------- rank agreement


def test_rank_agreement_perfect_and_deterministic():
    ids = [f"rm{i}" for i in range(8)]
    x = np.linspace(0.5, 0.9, 8)
    y = x * 10 + 1
    out = m.rank_agreement(x, y, ids=ids, seed=0, n_perm=200)
    assert set(out) == set(m.RANK_METRICS)
    for name, res in out.items():
        assert res["value"] == pytest.approx(1.0), name
        assert res["p_value"] <= 5 / 201, name
        assert set(res) == {"value", "ci_low", "ci_high", "p_value"}
    assert m.rank_agreement(x, y, ids=ids, seed=0, n_perm=200) == out


def test_rank_agreement_random_has_large_p():
    ids = list(range(10))
    rng = np.random.default_rng(2)
    x, y = rng.random(10), rng.random(10)
    out = m.rank_agreement(x, y, ids=ids, seed=1, n_perm=300)
    assert out["spearman"]["value"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert 0.0 < out["spearman"]["p_value"] <= 1.0
    # anti-agreement: one-sided test should not reject
    anti = m.rank_agreement(x, -x, ids=ids, seed=1, n_perm=300)
    assert anti["kendall_tau_b"]["p_value"] > 0.9


def test_rank_agreement_bootstrap():
    rng = np.random.default_rng(7)
    n_rms, n_items = 6, 300
    skill = np.linspace(0.55, 0.85, n_rms)
    bench = (rng.random((n_rms, n_items)) < skill[:, None]).astype(float)
    down = skill[:, None] * 5 + rng.normal(0, 1.0, (n_rms, n_items))
    ids = [f"rm{i}" for i in range(n_rms)]
    joint = m.rank_agreement_bootstrap(bench, down, ids=ids, seed=3, n_boot=100, joint=True)
    indep = m.rank_agreement_bootstrap(bench, down[:, :200], ids=ids, seed=3, n_boot=100, joint=False)
    assert joint == m.rank_agreement_bootstrap(bench, down, ids=ids, seed=3, n_boot=100, joint=True)
    for out in (joint, indep):
        assert set(out) == set(m.RANK_METRICS)
        for name, res in out.items():
            assert res["ci_low"] <= res["ci_high"], name
            assert -1.0 <= res["ci_low"] and res["ci_high"] <= 1.0, name
    x_full, y_full = bench.mean(1), down.mean(1)
    assert joint["spearman"]["value"] == pytest.approx(m.spearman(x_full, y_full))
    with pytest.raises(ValueError):
        m.rank_agreement_bootstrap(bench, down[:, :200], ids=ids, seed=3, n_boot=10, joint=True)
    with pytest.raises(ValueError):
        m.rank_agreement_bootstrap(bench, down[:5], ids=ids, seed=3, n_boot=10)


def test_metric_definitions_cover_metrics():
    for name in m.RANK_METRICS:
        assert m.METRIC_DEFINITIONS[name]
    for name in ("accuracy", "strict_accuracy", "mcnemar_p", "expected_best_of_k"):
        assert m.METRIC_DEFINITIONS[name]


# --------------------------------------------------------------------------- Best-of-N


def brute_best_of_k(r, g, k):
    """Average over all k-subsets of the mean grade of the subset's RM-argmax set (random tie-break)."""
    total, count = 0.0, 0
    for subset in itertools.combinations(range(len(r)), k):
        top = max(r[i] for i in subset)
        winners = [g[i] for i in subset if r[i] == top]
        total += sum(winners) / len(winners)
        count += 1
    return total / count


@st.composite
def candidates(draw):
    n = draw(st.integers(1, 8))
    r = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # few values: many ties
    g = draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n))
    k = draw(st.integers(1, n))
    return [float(v) for v in r], g, k


@given(candidates())
@settings(max_examples=200, deadline=None)
def test_expected_best_of_k_matches_brute_force(case):
    r, g, k = case
    assert m.expected_best_of_k(r, g, k) == pytest.approx(brute_best_of_k(r, g, k), abs=1e-9)
    assert m.oracle_best_of_k(g, k) == pytest.approx(brute_best_of_k(g, g, k), abs=1e-9)


def test_best_of_k_endpoints():
    r = [0.3, 0.9, 0.1, 0.5]
    g = [1.0, 2.0, 3.0, 4.0]
    assert m.expected_best_of_k(r, g, 1) == pytest.approx(np.mean(g))
    assert m.expected_best_of_k(r, g, 4) == pytest.approx(2.0)
    assert m.random_of_k(g) == pytest.approx(2.5)
    assert m.oracle_best_of_k(g, 4) == pytest.approx(4.0)
    # large N stays finite (log-space binomials)
    big = np.arange(3000, dtype=float)
    assert m.oracle_best_of_k(big, 1500) == pytest.approx(brute_like_large(3000, 1500))


def brute_like_large(n, k):
    """E[max of k-subset of 0..n-1] = k (n + 1) / (k + 1) - 1 for values 0..n-1."""
    return k * (n + 1) / (k + 1) - 1


def test_first_k_best():
    r = [0.5, 0.9, 0.9, 1.5]
    g = [1.0, 2.0, 3.0, 4.0]
    assert m.first_k_best(r, g, 1) == 1.0
    assert m.first_k_best(r, g, 3) == 2.0  # tie between index 1 and 2 -> lowest index
    assert m.first_k_best(r, g, 4) == 4.0


def test_best_of_k_errors():
    with pytest.raises(ValueError):
        m.expected_best_of_k([1.0, 2.0], [1.0, 2.0], 3)
    with pytest.raises(ValueError):
        m.expected_best_of_k([1.0, 2.0], [1.0, 2.0], 0)
    with pytest.raises(ValueError):
        m.expected_best_of_k([1.0, np.nan], [1.0, 2.0], 1)
    with pytest.raises(ValueError):
        m.first_k_best([1.0, 2.0], [1.0], 1)
    with pytest.raises(ValueError):
        m.random_of_k([])
