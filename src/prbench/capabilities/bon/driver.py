"""Best-of-N: does an RM pick the answer the user's own rubric grades highest?

Procedure (the paper's, made exact): a policy drew N answers per item once (`sampling`).
Every RM scores every sample once (content-hash score cache shared with `prbench eval`);
every distinct sample is graded once (`grader`). Then for k in 1, 2, 4, ..., N:

- `first_k`: grade of the RM's top pick among the first k samples (the paper: one fixed draw;
  RM ties go to the lowest index);
- `expected`: the exact expected grade of the RM's top pick from a uniformly random
  k-subset of the N samples (`metrics.expected_best_of_k`, RM ties averaged): no draw noise;
- `oracle`: the same with the grader itself as the RM (the ceiling at k);
- `random`: the mean grade (the floor, equal for every k).

Each curve is a mean over items with a percentile-bootstrap CI over items. Items whose
samples have an invalid grade are dropped from every curve; items where an RM gave an
invalid score are dropped from that RM's curve; both are counted, never filled in.

Because grading happens per distinct sample, not per (RM, k, item) pick, the grader is
called at most (distinct samples) times instead of the naive RMs x k values x items; the
summary reports both.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench import cost
from prbench.capabilities.bon.settings import BonSettings
from prbench.context.conditions import build_views, read_planner_file
from prbench.context.retrieval import load_retriever
from prbench.downstream.grader import Grader, load_grader
from prbench.downstream.results import DownstreamResult, write_downstream
from prbench.downstream.sampling import SampleSet, read_samples
from prbench.errors import PrbenchError
from prbench.evaluation.scoring import score_cached
from prbench.rewards.base import PointwiseRM, RewardModel, load_rm, shown_top_k
from prbench.stats import metrics
from prbench.store.cache import Cache, NullCache
from prbench.store.records import BonRunSummary, typed_summary
from prbench.store.runs import dumps, slug, write_json_atomic


def k_values(n: int) -> list[int]:
    """1, 2, 4, ... up to N, and N itself when it is not a power of two."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks


@dataclass
class BonResult:
    """What `best_of_n` returns: bon.json as its model, each RM's curves, the folder."""

    summary: BonRunSummary
    results: dict[str, DownstreamResult]
    path: Path | None
    written: dict[str, Any] = field(default_factory=dict, repr=False)
    """bon.json's object as written (key order and number types kept): what `--json` prints."""

    @classmethod
    def of(cls, summary: dict[str, Any], results: dict[str, DownstreamResult], path: Path | None) -> BonResult:
        typed = typed_summary(summary, (path or Path(".")) / "bon.json", BonRunSummary)
        return cls(typed, results, path, summary)


def _curve(per_item: dict[str, dict[int, float]], ks: Sequence[int], seed: int, n_boot: int) -> dict[str, list]:
    """Mean over items per k with a bootstrap CI over items."""
    means: list[float | None] = []
    lows: list[float | None] = []
    highs: list[float | None] = []
    for k in ks:
        vals = np.array([v[k] for v in per_item.values()], dtype=float)
        if vals.size == 0:
            means.append(None)
            lows.append(None)
            highs.append(None)
            continue
        lo, hi = metrics.bootstrap_ci(vals, seed=seed, n_boot=n_boot)
        means.append(float(vals.mean()))
        lows.append(lo)
        highs.append(hi)
    return {"mean": means, "ci_low": lows, "ci_high": highs}


def _load_rm(spec: str | RewardModel, options: dict[str, Any]) -> PointwiseRM:
    rm = spec if isinstance(spec, RewardModel) else load_rm(spec, **options)
    if not isinstance(rm, PointwiseRM):
        raise PrbenchError(f"{rm.spec}: Best-of-N needs a pointwise score per answer; "
                           "use a scalar RM or a judge in pointwise mode (--mode pointwise)")
    return rm


def _cache(given: Cache | None, namespace: str, persist: bool) -> Cache:
    """The cache given, else the shared one of `namespace` for a run that is written, else none."""
    return given if given is not None else Cache(namespace=namespace) if persist else NullCache()


def _rm_row(name: str, res: DownstreamResult, n_items: int, n_invalid: int, ks: Sequence[int], truncated: int,
            top_k: int) -> dict[str, Any]:
    """One RM's line of bon.json's `rms`."""
    return {"rm": name, "n_items": n_items, "k": list(ks), "first_k": res.first_k, "expected": res.expected,
            "ci_low": res.ci_low, "ci_high": res.ci_high, "n_invalid_score_items": n_invalid,
            "truncated_inputs": truncated, "top_k": top_k}


def best_of_n(
    samples: str | Path | SampleSet,
    rms: Sequence[str | RewardModel],
    grader: str | Grader,
    *,
    settings: BonSettings | None = None,
    out: str | Path | None = None,
    rm_options: dict[str, Any] | None = None,
    grader_options: dict[str, Any] | None = None,
    score_cache: Cache | None = None,
    grade_cache: Cache | None = None,
    on_progress: Callable[[str], None] | None = None,
    max_usd: float | None = None,
    prices: str | Path | None = None,
    batch: bool = False,
    **given: Any,
) -> BonResult:
    """Score, grade and summarise Best-of-N curves for each RM; write them under `out` if given.

    `settings` (or `given` keywords on top of it) are `BonSettings`. An API grader's spend lands in
    the summary's `cost`; `max_usd` caps it (`prbench.cost`; graded samples are cached: re-run to resume);
    `batch` grades through provider batches (`prbench.engines.batch`).
    """
    t0 = time.time()
    s = BonSettings.build(settings, **given)
    ss = samples if isinstance(samples, SampleSet) else read_samples(samples)
    ks = _ks(s, ss)
    persist = out is not None
    score_cache, grade_cache = _cache(score_cache, "scores", persist), _cache(grade_cache, "grades", persist)
    grader_obj = grader if isinstance(grader, Grader) else load_grader(grader, cache=grade_cache, **(grader_options or {}))
    ids = [it.id for it in ss.items]
    # 1. grades: every distinct sample once (the grader dedupes identical texts within an item)
    if on_progress:
        on_progress("grading")
    pairs, grade_of, grade_rows, spend = _grades(grader_obj, ss, out, max_usd=max_usd, prices=prices, batch=batch)
    gradable = [i for i in ids if np.all(np.isfinite(grade_of[i]))]
    excluded_grade = len(ids) - len(gradable)

    # 2. oracle and random curves (grader only)
    oracle_items, random_items = _references(grade_of, gradable, ks)
    oracle, rand = _curve(oracle_items, ks, s.seed, s.n_boot), _curve(random_items, ks, s.seed, s.n_boot)

    # 3. RM scores under the condition, views built once through conditions
    views_of: dict[int, list[Any]] = {}  # by top_k: RMs that ask for the same view share it
    options = {"batch_size": s.batch_size, "seed": s.seed, **(rm_options or {})}
    results: dict[str, DownstreamResult] = {}
    rm_summaries: list[dict[str, Any]] = []
    out_path = Path(out) if out is not None else None
    for spec in rms:
        rm = _load_rm(spec, options)
        top_k = shown_top_k(s.top_k, rm)  # eval's rule: the RM's own view unless one is given
        views = views_of.get(top_k) or views_of.setdefault(
            top_k, _views(ss.items, s.model_copy(update={"top_k": top_k}), persist))
        name = getattr(rm, "name", rm.spec)
        if on_progress:
            on_progress(f"scoring {name}")
        score_of, truncated = _scores(rm, ss, views, s.batch_size, score_cache)
        usable = [i for i in gradable if np.all(np.isfinite(score_of[i]))]
        if not usable:
            rm_summaries.append({"rm": name, "n_items": 0, "n_invalid_score_items": len(gradable),
                                 "error": f"no usable item: {excluded_grade} of {len(ids)} items have an invalid "
                                          f"grade, {len(gradable)} more an invalid RM score"})
            continue
        res = _rm_result(rm, name, usable, score_of, grade_of, ks, s, ss, grader_obj.spec,
                         oracle={i: oracle_items[i] for i in usable}, random={i: random_items[i] for i in usable},
                         excluded={"invalid_grade": excluded_grade, "invalid_score": len(gradable) - len(usable)},
                         truncated=truncated)
        results[name] = res
        rm_summaries.append(_rm_row(name, res, len(usable), len(gradable) - len(usable), ks, truncated, top_k))
        if out_path is not None:
            _write_rm(out_path / slug(name), res, ids, score_of, ks)

    summary = _bon_summary(ss, s, ks, grader_obj, pairs, rm_summaries, oracle, rand, n_gradable=len(gradable),
                           n_rms=len(rms), started=t0, spend=spend)
    if out_path is not None:
        out_path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out_path / "bon.json", summary)
        _write_grades(out_path / "grades.jsonl", grade_rows)
        _write_all_curves(out_path / "curves.csv", results, ks, oracle, rand)
    return BonResult.of(summary, results, out_path)


def _ks(s: BonSettings, ss: SampleSet) -> list[int]:
    """The k values of the curves (each in [1, N]); a samples folder with no complete item is an error."""
    if not ss.items:
        raise PrbenchError(f"{ss.path}: no complete items to evaluate")
    n = ss.n
    ks = sorted(set(s.ks)) if s.ks else k_values(n)
    if any(k < 1 or k > n for k in ks):
        raise PrbenchError(f"k values must lie in [1, {n}], got {ks}")
    return ks


def _references(grade_of: dict[str, np.ndarray], gradable: list[str], ks: list[int]) -> tuple[dict, dict]:
    """Per item and k: the grader's own best of k (oracle) and the mean grade (a random pick)."""
    return ({i: {k: metrics.oracle_best_of_k(grade_of[i], k) for k in ks} for i in gradable},
            {i: {k: metrics.random_of_k(grade_of[i]) for k in ks} for i in gradable})


def _bon_summary(ss: SampleSet, s: BonSettings, ks: list[int], grader: Grader, pairs: list, rm_summaries: list,
                 oracle: dict, rand: dict, *, n_gradable: int, n_rms: int, started: float, spend: Any
                 ) -> dict[str, Any]:
    """bon.json: every RM's curve beside the oracle and random ones, and the grader calls saved."""
    naive = n_rms * len(ks) * len(ss.items)
    return {
        "samples": str(ss.path), "condition": s.condition, "n_items": len(ss.items), "n_samples": ss.n, "k": list(ks),
        "grader": grader.run_info(), "rms": rm_summaries,
        "oracle": oracle, "random": rand, "n_gradable_items": n_gradable,
        "distinct_samples": len({grader.key(it, t) for it, t in pairs}),
        "grader_calls": {"made": grader.stats.calls, "naive": naive,
                         "naive_rule": "RMs x k values x items (one grading per pick)",
                         "saved_vs_naive": naive - grader.stats.calls},
        "seed": s.seed, "wall_time_s": round(time.time() - started, 3),
        "cost": spend.summary() if spend is not None else None,
    }


def _grades(grader: Grader, ss: SampleSet, out: str | Path | None, *, max_usd: float | None,
            prices: str | Path | None, batch: bool) -> tuple[list, dict[str, np.ndarray], list[dict[str, Any]], Any]:
    """(item, sample) pairs, each item's grades (NaN: invalid), the grades.jsonl rows, and the grader's spend
    (priced and capped by `prbench.cost`; through provider batches with `batch`)."""
    from prbench.engines.batch import optional, reading_only

    n = ss.n
    pairs = [(it, t) for it in ss.items for t in ss.samples[it.id]]
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)

    def collect() -> None:
        with reading_only(grader):
            grader.grade(pairs)

    with cost.tracking(grader, out, max_usd=max_usd, prices=prices, batch=batch) as spend, \
            optional(batch, grader, out, collect):
        grades = grader.grade(pairs)
    grade_of: dict[str, np.ndarray] = {}
    rows = []
    for j, it in enumerate(ss.items):
        gs = grades[j * n : (j + 1) * n]
        grade_of[it.id] = np.array([g.score for g in gs], dtype=float)
        rows.append({"id": it.id, "grades": [None if not g.valid else g.score for g in gs],
                     "aspects": [g.aspects for g in gs], "errors": [g.error for g in gs]})
    return pairs, grade_of, rows, spend


def _scores(rm: PointwiseRM, ss: SampleSet, views: Sequence[Any], batch_size: int, cache: Cache
            ) -> tuple[dict[str, np.ndarray], int]:
    """Each item's RM scores (NaN: invalid), in calls of a few batches, and how many inputs were truncated."""
    n = ss.n
    flat = [(v, t) for it, v in zip(ss.items, views) for t in ss.samples[it.id]]
    scores = []
    chunk = max(1, batch_size) * 4
    for start in range(0, len(flat), chunk):
        scores.extend(score_cached(rm, flat[start : start + chunk], cache))
    score_of = {it.id: np.array([x.value if x.valid else np.nan for x in scores[j * n : (j + 1) * n]], dtype=float)
                for j, it in enumerate(ss.items)}
    return score_of, int(sum(x.truncated for x in scores))


def _rm_result(rm: PointwiseRM, name: str, usable: list[str], score_of: dict[str, np.ndarray],
               grade_of: dict[str, np.ndarray], ks: list[int], s: BonSettings, ss: SampleSet, grader_spec: str, *,
               oracle: dict, random: dict, excluded: dict[str, int], truncated: int) -> DownstreamResult:
    """One RM's curves on the items it and the grader both scored (expected and first-k best-of-k, with CIs)."""
    per_item = {i: {k: metrics.expected_best_of_k(score_of[i], grade_of[i], k) for k in ks} for i in usable}
    per_item_first = {i: {k: metrics.first_k_best(score_of[i], grade_of[i], k) for k in ks} for i in usable}
    exp_curve = _curve(per_item, ks, s.seed, s.n_boot)
    first_curve = _curve(per_item_first, ks, s.seed, s.n_boot)
    return DownstreamResult(
        rm=name, setting="bon", k=list(ks), first_k=first_curve["mean"], expected=exp_curve["mean"],
        ci_low=exp_curve["ci_low"], ci_high=exp_curve["ci_high"],
        per_item={i: {str(k): v for k, v in d.items()} for i, d in per_item.items()},
        grader=grader_spec, n_items=len(usable),
        extra={
            "condition": s.condition, "n_samples": ss.n, "samples": str(ss.path),
            "first_k_ci_low": first_curve["ci_low"], "first_k_ci_high": first_curve["ci_high"],
            "per_item_first_k": {i: {str(k): v for k, v in d.items()} for i, d in per_item_first.items()},
            "oracle": _curve(oracle, ks, s.seed, s.n_boot)["mean"], "random": _curve(random, ks, s.seed, s.n_boot)["mean"],
            "n_excluded": excluded, "truncated_inputs": truncated, "rm_fingerprint": rm.fingerprint(), "seed": s.seed,
            "ci": "percentile bootstrap over items, 95%", "n_boot": s.n_boot,
        },
    )


def _views(items: Sequence[Any], s: BonSettings, persist: bool) -> list[Any]:
    """What the RMs see of each item under the condition, built once through conditions."""
    planner = read_planner_file(s.planner_file) if s.planner_file else None
    return build_views(items, s.condition, retriever=load_retriever(s.retriever), top_k=s.top_k, planner=planner,
                       seed=s.seed, max_context_chars=s.max_context_chars,
                       cache=Cache(namespace="retrieval") if persist else None)


def _write_rm(rm_dir: Path, res: DownstreamResult, ids: Sequence[str], score_of: dict[str, np.ndarray],
              ks: list[int]) -> None:
    write_downstream(rm_dir, res)
    _write_scores(rm_dir / "scores.jsonl", ids, score_of)
    _write_curve_csv(rm_dir / "curve.csv", res.rm, ks, res)


def _write_scores(path: Path, ids: Sequence[str], score_of: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for i in ids:
            fh.write(dumps({"id": i, "scores": [float(s) if np.isfinite(s) else None for s in score_of[i]]}) + "\n")


def _write_grades(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(dumps(r) + "\n")


_CSV_HEAD = ["rm", "k", "first_k", "expected", "ci_low", "ci_high", "oracle", "random"]


def _write_curve_csv(path: Path, name: str, ks: Sequence[int], res: DownstreamResult) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(_CSV_HEAD)
        for j, k in enumerate(ks):
            w.writerow([name, k, res.first_k[j], res.expected[j], res.ci_low[j], res.ci_high[j],
                        res.extra["oracle"][j], res.extra["random"][j]])


def _write_all_curves(path: Path, results: dict[str, DownstreamResult], ks: Sequence[int],
                      oracle: dict[str, list], rand: dict[str, list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(_CSV_HEAD)
        for name, res in results.items():
            for j, k in enumerate(ks):
                w.writerow([name, k, res.first_k[j], res.expected[j], res.ci_low[j], res.ci_high[j],
                            res.extra["oracle"][j], res.extra["random"][j]])
        for label, curve in (("<oracle>", oracle), ("<random>", rand)):
            for j, k in enumerate(ks):
                w.writerow([label, k, "", curve["mean"][j], curve["ci_low"][j], curve["ci_high"][j], "", ""])
