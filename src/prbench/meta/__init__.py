"""Meta-evaluation: does benchmark accuracy rank reward models (RMs) the way downstream use does?

A benchmark is only worth its power to predict what an RM does when used. This module joins
eval runs (per-pair credits) with downstream results (per-item outcomes) per RM, and for every
benchmark (data x condition) and downstream setting (Best-of-N at each k, RL, RGD, policy
accuracy) computes every rank-agreement metric of `metrics.RANK_METRICS` with a permutation
p-value and an item-level bootstrap CI (`metrics.rank_agreement_bootstrap`).

Choices, all stated in the output's `parameters` and `definitions`:

* RM alignment: an eval run is known by its summary's `spec` (falling back to `model`); a
  downstream result names its RM in `rm` and matches either the eval run's `spec` or `model`.
* Items: per side, the items every compared RM scored validly (intersection); the benchmark
  value per RM is recomputed on those items, so it can differ slightly from the run summary
  when some RM had invalid outputs.
* Resampling: with `pairing="auto"` the two sides are resampled jointly (same item indices,
  restricted to the shared items) when the shared item ids make up at least `joint_min_share`
  of each side's items; otherwise independently, each side over all of its items.
* Benchmark summaries: `mean` (accuracy, ties 0.5), `worst_category` (each RM's lowest
  per-category accuracy: one bad category hurts the user it belongs to), `mean_margin`
  (mean score(chosen) - score(rejected), pointwise RMs only; raw RM units, so only
  comparable between RMs on a shared scale). The chosen summary gets the full statistics;
  every available summary gets its point Spearman and Kendall so they can be compared.
* Fewer than `min_rms` (3) aligned RMs: no correlation, a note instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prbench import __version__
from prbench.errors import PrbenchError
from prbench.meta.load import (
    check_options,
    load_eval_runs,
    load_settings,
    settings_of,
    split_runs,
    value_definitions,
)
from prbench.meta.render import (
    CROSS_LABELS,
    PAPER_COLUMNS,
    cross_benchmark_markdown,
    fmt_ci,
    main_rows,
    meta_markdown,
    write_csv,
    write_meta,
)
from prbench.meta.result import BenchmarkInfo, MetaDefaults, MetaParameters, MetaResult, MetaRow, SettingInfo
from prbench.meta.stats import (
    CROSS_METRICS,
    SUMMARIES,
    agreement_row,
    cross_benchmark,
    judge_agreement,
    paper_b,
    summary_comparison,
)
from prbench.runkinds import MetaOptions, Run, Scan, Setting, scan_runs
from prbench.stats import metrics

EvalRun = Run  # the name meta's readers used for an eval run before run kinds
__all__ = ["CROSS_LABELS", "CROSS_METRICS", "PAPER_COLUMNS", "SUMMARIES", "EvalRun", "MetaResult", "MetaRow",
           "Setting", "cross_benchmark", "cross_benchmark_markdown", "fmt_ci", "load_eval_runs", "load_settings",
           "main_rows", "meta_evaluate", "meta_markdown", "write_csv", "write_meta"]

PAIRINGS: tuple[str, ...] = ("auto", "joint", "independent")
MIN_RMS = 3
FORMAT_VERSION = 1
SUMMARY_DEFINITIONS = {
    "mean": "benchmark accuracy: mean per-pair credit (1 chosen preferred, 0.5 tie, 0 rejected) over shared valid items",
    "worst_category": "lowest per-category accuracy of the RM (each RM its own worst category); CI by item bootstrap "
                      "(a category left empty in a resample is skipped in that replicate)",
    "mean_margin": "mean of score(chosen) - score(rejected) over shared valid items; pointwise RMs only, raw RM units",
}
EXTRA_DEFINITIONS = {
    "ci_item_bootstrap": "percentile bootstrap over items: each replicate resamples benchmark pairs and downstream items "
                         "with replacement, recomputes per-RM summaries and every metric; replicates where a metric is "
                         "undefined (constant scores) are dropped",
    "resampling_joint": "benchmark and downstream restricted to their shared item ids and resampled with the same indices",
    "resampling_independent": "benchmark items and downstream items resampled independently, each side over all its items",
    "rm_alignment": "eval run key = summary 'spec' (else 'model'); a downstream 'rm' matches an eval run's spec or model",
    "items": "per side, only items every compared RM has a valid value for (intersection)",
    "paper_b": "Kendall tau-b between RM accuracy and RGD policy accuracy over RMs (paper B reports 0.08-0.31): from the "
               "benchmark run ('benchmark') and from the RM's own full-text preference inside the policy-accuracy run "
               "('in-run', same items and condition)",
    "best_summary": "the benchmark summary with the highest Spearman rho (then Kendall tau-b) against the setting",
    "cross_benchmark": "per downstream setting compared with two or more benchmarks (data x condition): the benchmark "
                       "with the highest NDCG, weighted tau, Spearman and RBO, and the one best on most of them "
                       "(ties: Spearman); point values decide, CIs and permutation p-values say how firmly",
    "items_multi_response": "benchmarks whose items hold several responses (RewardBench 2, RM-Bench) count each item "
                            "once, by its format's rule (prbench.stats.metrics.collapse_items)",
}


def _check_args(summary: str, pairing: str, p: float, n_boot: int, n_perm: int, min_rms: int) -> None:
    if summary not in SUMMARIES:
        raise PrbenchError(f"unknown summary {summary!r} (use {', '.join(SUMMARIES)})")
    if pairing not in PAIRINGS:
        raise PrbenchError(f"unknown pairing {pairing!r} (use {', '.join(PAIRINGS)})")
    if not 0.0 < p < 1.0:
        raise PrbenchError(f"RBO persistence p must be in (0, 1), got {p}")
    if n_boot < 1 or n_perm < 1:
        raise PrbenchError("n_boot and n_perm must be >= 1")
    if min_rms < 2:
        raise PrbenchError("min_rms must be at least 2")


def _benchmarks(runs: Sequence[Run], notes: list[str]) -> dict[tuple[str, str], dict[str, Run]]:
    """Eval runs by benchmark (data, condition), then by RM; a second run of an RM wins, with a note."""
    groups: dict[tuple[str, str], dict[str, Run]] = {}
    for run in runs:
        g = groups.setdefault((run.data, run.condition), {})
        if run.key in g:
            notes.append(f"{run.data} [{run.condition}]: two runs of {run.key} ({g[run.key].path} and {run.path}); "
                         f"using {run.path}")
        g[run.key] = run
    return groups


def _definitions() -> dict[str, str]:
    return {
        **{name: metrics.METRIC_DEFINITIONS[name] for name in (*metrics.RANK_METRICS, "p_value")},
        **{f"summary.{n}": d for n, d in SUMMARY_DEFINITIONS.items()},
        **EXTRA_DEFINITIONS,
        **value_definitions(),
        "note": "definitions state library defaults (1000 permutations, p=0.9, all RMs for NDCG); "
                "the values used here are under 'parameters'",
    }


def meta_evaluate(
    benchmark_runs: Sequence[str | Path],
    downstream: Sequence[str | Path],
    *,
    summary: str = "mean",
    seed: int = 0,
    n_boot: int = 1000,
    n_perm: int = 1000,
    p: float = 0.9,
    k: int | None = None,
    conditions: str | Sequence[str] | None = None,
    scanned: Scan | None = None,
    match_condition: bool = False,
    pairing: str = "auto",
    joint_min_share: float = 0.9,
    bon_curve: str = "expected",
    bon_k: str = "all",
    pa_metric: str = "total",
    ci: float = 0.95,
    min_rms: int = MIN_RMS,
) -> MetaResult:
    """Rank agreement between benchmark summaries and downstream outcomes over RMs (module docstring).

    `benchmark_runs`: run roots or run folders; `downstream`: downstream.json files or folders
    (every downstream run kind found there counts, policy accuracy included). `conditions`
    keeps only benchmarks of these conditions; `match_condition` pairs a benchmark condition
    only with downstream settings run under the same condition (or none stated). `bon_k="max"`
    skips the Best-of-N rows below the largest k (each row costs n_boot + n_perm metric passes).
    `scanned`: the runs already read (the report passes its own, so each folder is read once).
    Returns the typed result (`prbench.meta.result.MetaResult`: parameters, definitions,
    benchmarks, settings, rows, paper_b, summary_comparison, cross_benchmark, notes).
    """
    _check_args(summary, pairing, p, n_boot, n_perm, min_rms)
    conds = [conditions] if isinstance(conditions, str) else (list(conditions) if conditions else None)
    mopts = MetaOptions(bon_curve=bon_curve, bon_k=bon_k, pa_metric=pa_metric)
    check_options(mopts)
    scan = scanned if scanned is not None else scan_runs([*benchmark_runs, *downstream])
    runs, down = split_runs(scan, benchmark_runs, downstream, conds)
    notes = list(scan.skipped)
    settings = settings_of(down, mopts, notes)
    opts: dict[str, Any] = {"summary": summary, "seed": seed, "n_boot": n_boot, "n_perm": n_perm, "p": p, "k": k, "ci": ci,
            "pairing": pairing, "joint_min_share": joint_min_share, "min_rms": min_rms}
    groups = _benchmarks(runs, notes)
    if not runs:
        notes.append("no eval runs found" + (f" for conditions {', '.join(conds)}" if conds else ""))
    if not settings:
        notes.append("no downstream results found (downstream.json files or policy-accuracy runs)")
    rows: list[MetaRow] = []
    for gkey in sorted(groups):
        for s in settings:
            if match_condition and s.condition and s.condition != gkey[1]:
                continue
            rows.append(agreement_row(gkey, groups[gkey], s, opts))
    return MetaResult(
        format=FORMAT_VERSION,
        prbench=__version__,
        parameters=MetaParameters(**opts, conditions=conds, match_condition=match_condition, bon_curve=bon_curve,
                                  bon_k=bon_k, pa_metric=pa_metric, metrics=list(metrics.RANK_METRICS),
                                  benchmark_runs=[str(x) for x in benchmark_runs],
                                  downstream=[str(x) for x in downstream]),
        defaults=MetaDefaults(min_rms=MIN_RMS),
        definitions=_definitions(),
        benchmarks=[BenchmarkInfo(label=f"{d} [{c}]", data=d, condition=c, rms=sorted(g),
                                  runs={rm: str(r.path) for rm, r in sorted(g.items())},
                                  judge_agreement=judge_agreement(g)) for (d, c), g in sorted(groups.items())],
        settings=[SettingInfo.model_validate(s.describe()) for s in settings],
        rows=rows,
        paper_b=paper_b(rows, settings, opts),
        summary_comparison=summary_comparison(rows),
        cross_benchmark=cross_benchmark(rows),
        notes=notes,
    )

