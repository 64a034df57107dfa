"""Meta-evaluation statistics: item matrices per side, bootstrap CIs, permutation p-values, comparisons.

See the package docstring for the choices; the rank metrics themselves are `prbench.stats.metrics`'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prbench.meta.result import (
    BenchmarkRef,
    CrossBenchmark,
    CrossEntry,
    JudgeAgreement,
    JudgePair,
    JudgeWithLabels,
    MetaRow,
    PaperB,
    SettingRef,
    SummaryAgreement,
    SummaryComparison,
    SummaryStanding,
)
from prbench.runkinds import Run, Setting
from prbench.stats import metrics
from prbench.stats.metrics import cohen_kappa, krippendorff_alpha
from prbench.store.records import PairwiseRecord, RankValue

SUMMARIES: tuple[str, ...] = ("mean", "worst_category", "mean_margin")


def _clean(v: Any) -> Any:
    """NaN/inf -> None so JSON stays valid and 'undefined' reads as such."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return _clean(v.item())
    return v


def _weights(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.bincount(rng.integers(0, n, n), minlength=n).astype(float)


def _category_minimum(mx: np.ndarray, masks: Sequence[np.ndarray], w: np.ndarray) -> np.ndarray:
    """Per RM, the lowest weighted per-category mean (categories with zero weight are skipped)."""
    cats = []
    for m in masks:
        tw = w[m].sum()
        if tw > 0:
            cats.append(mx[:, m] @ w[m] / tw)
    return np.min(np.vstack(cats), axis=0)


def _worst_category_bootstrap(mx: np.ndarray, masks: Sequence[np.ndarray], my: np.ndarray, *, ids: Sequence[str],
                              seed: int, n_boot: int, joint: bool, ci: float, p: float,
                              k: int | None) -> dict[str, dict[str, float | None]]:
    """Item bootstrap like metrics.rank_agreement_bootstrap, with worst-category accuracy as the x summary."""
    fns = metrics._metric_fns(ids, p, k)
    rng = np.random.default_rng(seed)
    reps = {name: np.full(n_boot, np.nan) for name in fns}
    for b in range(n_boot):
        wx = _weights(mx.shape[1], rng)
        wy = wx if joint else _weights(my.shape[1], rng)
        xb = _category_minimum(mx, masks, wx)
        yb = my @ wy / wy.sum()
        for name, fn in fns.items():
            reps[name][b] = fn(xb, yb)
    x_full = _category_minimum(mx, masks, np.ones(mx.shape[1]))
    y_full = my.mean(axis=1)
    alpha = (1 - ci) / 2
    out = {}
    for name, fn in fns.items():
        r = reps[name][np.isfinite(reps[name])]
        lo, hi = (float(np.quantile(r, alpha)), float(np.quantile(r, 1 - alpha))) if r.size else (None, None)
        out[name] = {"value": fn(x_full, y_full), "ci_low": lo, "ci_high": hi}
    return out


@dataclass
class _Side:
    """One side of a comparison: per-RM item values on the items all RMs share."""

    items: list[str]
    matrix: np.ndarray  # (n_rms, n_items)
    categories: list[str] | None = None


def _bench_side(runs: Mapping[str, Run], rms: Sequence[str], summary: str) -> _Side | None:
    """Benchmark item matrix for `summary`; None when an RM lacks what the summary needs (margins)."""
    field_name = "margin" if summary == "mean_margin" else "credit"
    tables = []
    cats: dict[str, str] = {}
    for rm in rms:
        t = {}
        # Multi-response items (RewardBench 2, RM-Bench) count once, by their rule; margins stay per pair.
        # The rows in their written shape: `margin` is a pointwise run's extra, items are computed by their rule.
        items = runs[rm].items
        rows = metrics.written_rows(items) if summary == "mean_margin" else metrics.collapse_items(items)
        for item in rows:
            if item.get("credit") is None or item.get(field_name) is None:
                continue
            t[str(item["id"])] = float(item[field_name])
            cats.setdefault(str(item["id"]), str(item.get("category", "?")))
        if not t:
            return None
        tables.append(t)
    items = sorted(set.intersection(*(set(t) for t in tables)))
    if not items:
        return None
    return _Side(items, np.array([[t[i] for i in items] for t in tables]), [cats[i] for i in items])


def _downstream_side(values: Mapping[str, Mapping[str, float]], rms: Sequence[str]) -> _Side | None:
    items = sorted(set.intersection(*(set(values[rm]) for rm in rms)))
    if not items:
        return None
    return _Side(items, np.array([[values[rm][i] for i in items] for rm in rms], dtype=float))


def _restrict(side: _Side, items: Sequence[str]) -> _Side:
    pos = {i: j for j, i in enumerate(side.items)}
    idx = [pos[i] for i in items]
    cats = [side.categories[j] for j in idx] if side.categories is not None else None
    return _Side(list(items), side.matrix[:, idx], cats)


def _summary_values(side: _Side, summary: str) -> np.ndarray:
    if summary == "worst_category":
        return _category_minimum(side.matrix, _masks(side), np.ones(len(side.items)))
    return side.matrix.mean(axis=1)


def _masks(side: _Side) -> list[np.ndarray]:
    cats = np.array(side.categories or ["?"] * len(side.items))
    return [cats == c for c in sorted(set(cats.tolist()))]


def _agreement(bench: _Side, down: _Side, summary: str, rms: Sequence[str], joint: bool,
               opts: Mapping[str, Any]) -> dict[str, RankValue]:
    """Values, item-bootstrap CIs and permutation p-values of every rank metric for one summary."""
    common = {"ids": list(rms), "seed": opts["seed"], "p": opts["p"], "k": opts["k"]}
    if summary == "worst_category":
        boot = _worst_category_bootstrap(bench.matrix, _masks(bench), down.matrix, n_boot=opts["n_boot"],
                                         joint=joint, ci=opts["ci"], **common)
    else:
        boot = metrics.rank_agreement_bootstrap(bench.matrix, down.matrix, n_boot=opts["n_boot"], joint=joint,
                                                ci=opts["ci"], **common)
    x, y = _summary_values(bench, summary), down.matrix.mean(axis=1)
    perm = metrics.rank_agreement(x, y, n_perm=opts["n_perm"], **common)
    return {name: RankValue(value=_clean(boot[name]["value"]), ci_low=_clean(boot[name]["ci_low"]),
                            ci_high=_clean(boot[name]["ci_high"]), p_value=_clean(perm[name]["p_value"]))
            for name in metrics.RANK_METRICS}


def _pairing(bench: _Side, down: _Side, pairing: str, min_share: float) -> tuple[bool, list[str]]:
    """(joint?, shared item ids) under the pairing rule in the module docstring."""
    shared = sorted(set(bench.items) & set(down.items))
    if pairing == "independent" or not shared:
        return False, shared
    if pairing == "joint":
        return True, shared
    share_b = len(shared) / len(bench.items)
    share_d = len(shared) / len(down.items)
    return (share_b >= min_share and share_d >= min_share), shared


def agreement_row(group_key: tuple[str, str], runs: Mapping[str, Run], setting: Setting,
         opts: Mapping[str, Any]) -> MetaRow:
    """One benchmark x setting row: aligned RMs, items, resampling, metrics, summary comparison."""
    data, condition = group_key
    alias: dict[str, str] = {}
    for key, run in runs.items():
        for a in run.aliases:
            alias.setdefault(a, key)
    down_vals = {alias[rm]: v for rm, v in setting.values.items() if rm in alias}
    rms = sorted(set(runs) & set(down_vals))
    row = MetaRow(
        benchmark=BenchmarkRef(data=data, condition=condition, label=f"{data} [{condition}]", summary=opts["summary"]),
        setting=SettingRef(label=setting.label, setting=setting.setting, k=setting.k, max_k=setting.max_k,
                           condition=setting.condition),
        n_rms=len(rms), rms=rms,
        unmatched_downstream_rms=sorted(rm for rm in setting.values if rm not in alias),
        metrics=None, by_summary={}, best_summary=None, note=None,
    )
    if len(rms) < opts["min_rms"]:
        row.note = (f"needs at least {opts['min_rms']} RMs with both benchmark and downstream results, "
                       f"got {len(rms)}" + (f" ({', '.join(rms)})" if rms else ""))
        return row
    down = _downstream_side(down_vals, rms)
    if down is None:
        row.note = "the RMs share no downstream item"
        return row
    sides = {s: _bench_side(runs, rms, s) for s in SUMMARIES}
    primary = sides[opts["summary"]]
    if primary is None:
        row.note = (f"benchmark summary {opts['summary']!r} is not available for every RM (an RM without valid "
                       "per-item records, no item valid for all RMs, or margins asked of a pairwise judge)")
        return row
    joint, shared = _pairing(primary, down, opts["pairing"], opts["joint_min_share"])
    if opts["pairing"] == "joint" and not shared:
        row.note = "pairing='joint' but benchmark and downstream share no item id"
        return row
    b_side, d_side = (_restrict(primary, shared), _restrict(down, shared)) if joint else (primary, down)
    row.resampling = "joint" if joint else "independent"
    row.n_items_benchmark, row.n_items_downstream = len(b_side.items), len(d_side.items)
    row.n_items_shared = len(shared)
    row.benchmark_scores = {rm: _clean(float(v)) for rm, v in zip(rms, _summary_values(b_side, opts["summary"]))}
    row.downstream_scores = {rm: _clean(float(v)) for rm, v in zip(rms, d_side.matrix.mean(axis=1))}
    row.metrics = _agreement(b_side, d_side, opts["summary"], rms, joint, opts)
    y = d_side.matrix.mean(axis=1)
    for name, side in sides.items():
        if side is None:
            row.by_summary[name] = None
            continue
        if joint:
            if not set(shared) <= set(side.items):
                row.by_summary[name] = None
                continue
            side = _restrict(side, shared)
        x = _summary_values(side, name)
        row.by_summary[name] = SummaryAgreement(spearman=_clean(metrics.spearman(x, y)),
                                                kendall_tau_b=_clean(metrics.kendall_tau_b(x, y)),
                                                scores={rm: _clean(float(v)) for rm, v in zip(rms, x)})
    ranked = [(n, v.spearman, v.kendall_tau_b) for n, v in row.by_summary.items() if v and v.spearman is not None]
    if ranked:
        row.best_summary = max(ranked, key=lambda r: (r[1], r[2] or -2.0))[0]
    return row


def paper_b(rows: Sequence[MetaRow], settings: Sequence[Setting], opts: Mapping[str, Any]) -> list[PaperB]:
    """Kendall tau-b between RM accuracy and policy accuracy: benchmark-based and in-run."""
    out = []
    for row in rows:
        if row.setting.setting != "policy_accuracy":
            continue
        kt = row.metrics["kendall_tau_b"] if row.metrics else None
        out.append(PaperB(source="benchmark", benchmark=row.benchmark.label, setting=row.setting.label,
                          n_rms=row.n_rms, kendall_tau_b=kt, note=row.note))
    for s in settings:
        if s.setting != "policy_accuracy" or not s.rm_credit:
            continue
        rms = sorted(set(s.rm_credit) & set(s.values))
        entry = PaperB(source="in-run", benchmark="RM preference inside the policy-accuracy run",
                       setting=s.label, n_rms=len(rms), kendall_tau_b=None, note=None)
        if len(rms) < opts["min_rms"]:
            entry.note = f"needs at least {opts['min_rms']} RMs with full-text RM preferences, got {len(rms)}"
        else:
            x_side = _downstream_side(s.rm_credit, rms)
            y_side = _downstream_side(s.values, rms)
            shared = sorted(set(x_side.items) & set(y_side.items)) if x_side and y_side else []
            if not x_side or not y_side or not shared:
                entry.note = "no item has both an RM preference and a policy preference for every RM"
            else:
                res = _agreement(_restrict(x_side, shared), _restrict(y_side, shared), "mean", rms, True, opts)
                entry.kendall_tau_b = res["kendall_tau_b"]
                entry.spearman = res["spearman"]
                entry.n_items = len(shared)
        out.append(entry)
    return out


def summary_comparison(rows: Sequence[MetaRow]) -> SummaryComparison:
    """Which benchmark summary tracks downstream best, compared on the same rows.

    Means are taken over the rows where every compared summary has a Spearman value (a summary
    available on fewer rows, e.g. margins without pairwise judges, would otherwise be averaged
    over a different, easier set). If no row has them all, the summary available on the fewest
    rows is left out until some rows are common. `best_in_rows` counts per-row wins over all rows.
    """
    def val(r: MetaRow, name: str, metric: str) -> float | None:
        if name not in r.by_summary:  # summary name -> its agreement
            return None
        agree = r.by_summary[name]
        return None if agree is None else (agree.spearman if metric == "spearman" else agree.kendall_tau_b)

    compared = [n for n in SUMMARIES if any(val(r, n, "spearman") is not None for r in rows)]
    common: list[MetaRow] = []
    while compared:
        common = [r for r in rows if all(val(r, n, "spearman") is not None for n in compared)]
        if common:
            break
        compared.remove(min(compared, key=lambda n: sum(val(r, n, "spearman") is not None for r in rows)))
    overall: dict[str, SummaryStanding] = {}
    for name in SUMMARIES:
        sp = [v for v in (val(r, name, "spearman") for r in common) if v is not None] if name in compared else []
        kt = [v for v in (val(r, name, "kendall_tau_b") for r in common) if v is not None] if name in compared else []
        overall[name] = SummaryStanding(mean_spearman=float(np.mean(sp)) if sp else None,
                                        mean_kendall_tau_b=float(np.mean(kt)) if kt else None, n_rows=len(sp),
                                        n_rows_available=sum(val(r, name, "spearman") is not None for r in rows),
                                        best_in_rows=sum(1 for r in rows if r.best_summary == name))
    ranked = [(n, v.mean_spearman, v.mean_kendall_tau_b) for n, v in overall.items() if v.mean_spearman is not None]
    best = max(ranked, key=lambda r: (r[1] or 0.0, r[2] or -2.0))[0] if ranked else None
    return SummaryComparison(
        overall=overall, best=best, compared=compared, n_common_rows=len(common),
        rule="highest mean Spearman rho over the benchmark x setting rows where every compared summary is "
             "defined (ties: mean Kendall tau-b); point values, no CI: a hint, not a test")


CROSS_METRICS: tuple[str, ...] = ("ndcg", "weighted_tau", "spearman", "rbo")


def cross_benchmark(rows: Sequence[MetaRow]) -> list[CrossBenchmark]:
    """Per downstream setting: every benchmark's rank agreement, and which one tracks it best.

    One entry per setting (Best-of-N at its largest k) that at least two benchmarks (data x
    condition) were compared with. `best[metric]` is the benchmark with the highest value of
    that metric (ties: the first in label order); `best_overall` the one best on most of
    NDCG, weighted tau, Spearman and RBO (ties: higher Spearman). `same_rms` says whether every
    benchmark was compared over the same RMs (else the values rank different RM sets).
    Point values decide; the CIs and permutation p-values beside them say how firmly.
    """
    by_setting: dict[str, list[MetaRow]] = {}
    for r in rows:
        if r.setting.setting == "bon" and not r.setting.max_k:
            continue
        by_setting.setdefault(r.setting.label, []).append(r)
    out = []
    for label, rs in by_setting.items():
        if len({r.benchmark.label for r in rs}) < 2:
            continue
        entries = [CrossEntry(benchmark=r.benchmark.label, data=r.benchmark.data, condition=r.benchmark.condition,
                              n_rms=r.n_rms, rms=r.rms,
                              metrics={m: r.metrics[m] for m in CROSS_METRICS} if r.metrics else None, note=r.note)
                   for r in sorted(rs, key=lambda r: r.benchmark.label)]
        best: dict[str, str | None] = {}
        for m in CROSS_METRICS:
            scored = [(v, e.benchmark) for e in entries if (v := e.metric(m).value) is not None]
            top = max((v for v, _ in scored), default=None)
            best[m] = next((b for v, b in scored if v == top), None) if scored else None
        wins = {e.benchmark: sum(1 for m in CROSS_METRICS if best[m] == e.benchmark) for e in entries}

        def spearman_of(e: CrossEntry) -> float:
            v = e.metric("spearman").value
            return v if v is not None else -2.0

        ranked = sorted((e for e in entries if e.metrics), key=lambda e: (-wins[e.benchmark], -spearman_of(e)))
        out.append(CrossBenchmark(setting=label, benchmarks=entries, best=best,
                                  best_overall=ranked[0].benchmark if ranked and wins[ranked[0].benchmark] else None,
                                  wins=wins, same_rms=len({tuple(e.rms) for e in entries}) == 1))
    return out




# -- judge agreement ---------------------------------------------------------------------------
# Cohen's kappa and Krippendorff's alpha live with the other statistics (`prbench.stats.metrics`).


def judge_agreement(runs: Mapping[str, Run]) -> JudgeAgreement | None:
    """Agreement of the pairwise judges of one benchmark (data x condition), None with no judge.

    Between judges: Cohen's kappa on the side each picked (chosen, rejected, tie) over the items both judged
    validly, and Krippendorff's alpha (nominal) over all of them. With the labels: Cohen's kappa between the
    position the judge picked (first order) and the position the labelled chosen answer was shown in, which
    (unlike accuracy) gives a judge that always answers "A" nothing for the pairs where A happened to win.
    """
    judges = {k: r for k, r in sorted(runs.items()) if any(isinstance(rec, PairwiseRecord) for rec in r.items)}
    if not judges:
        return None
    sides = {k: {rec.id: rec.credit for rec in r.items if rec.credit is not None}
             for k, r in judges.items()}
    with_labels = []
    for k, r in judges.items():
        shown = [(rec.verdicts[0], rec.chosen_position) for rec in r.items
                 if isinstance(rec, PairwiseRecord) and rec.verdicts and rec.verdicts[0] is not None and rec.chosen_position]
        with_labels.append(JudgeWithLabels(judge=k, kappa=_clean(cohen_kappa([v for v, _ in shown],
                                                                             [c for _, c in shown])), n=len(shown)))
    pairs = []
    names = list(judges)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(sides[a].keys() & sides[b].keys())
            pairs.append(JudgePair(a=a, b=b, n=len(shared), agree=_clean(
                float(np.mean([sides[a][x] == sides[b][x] for x in shared])) if shared else None),
                kappa=_clean(cohen_kappa([sides[a][x] for x in shared], [sides[b][x] for x in shared]))))
    items = sorted(set().union(*(s.keys() for s in sides.values())))
    alpha = krippendorff_alpha([[sides[k].get(x) for k in names] for x in items]) if len(names) > 1 else None
    return JudgeAgreement(judges=names, with_labels=with_labels, pairs=pairs, krippendorff_alpha=_clean(alpha),
                          n_items=len(items))
