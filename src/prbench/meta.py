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

import csv
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench import __version__, metrics
from prbench.downstream.results import FILENAME as DOWNSTREAM_FILE
from prbench.downstream.results import DownstreamResult, read_downstream
from prbench.errors import PrbenchError
from prbench.records import run_kind
from prbench.runs import read_json, write_json_atomic

SUMMARIES: tuple[str, ...] = ("mean", "worst_category", "mean_margin")
PAIRINGS: tuple[str, ...] = ("auto", "joint", "independent")
MIN_RMS = 3
FORMAT_VERSION = 1
# The paper's table columns (their order), then Kendall tau-b.
PAPER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ndcg", "NDCG"), ("weighted_tau", "weighted tau"), ("spearman", "Spearman"), ("rbo", "RBO"),
    ("kendall_tau_b", "Kendall"),
)
SETTING_NAMES = {"bon": "BoN", "rl": "RL", "rgd": "RGD", "policy_accuracy": "policy accuracy"}

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
    "bon_value": "Best-of-N downstream score at k: mean over items of the exact expected rubric grade of the RM's pick "
                 "from a random k-subset ('expected'), or of its pick among the first k samples ('first_k')",
    "rl_value": "mean rubric grade of the RL-trained policy's held-out answers",
    "rgd_value": "mean per-item score (rubric grade or gold-answer metric) of the reward-guided decoding output",
    "policy_accuracy_value": "share of pairs where the RGD-adapted policy's guided log-likelihood of chosen exceeds "
                             "rejected's (ties 0.5); 'total' sums token log-probs, 'normalized' averages them",
    "paper_b": "Kendall tau-b between RM accuracy and RGD policy accuracy over RMs (paper B reports 0.08-0.31): from the "
               "benchmark run ('benchmark') and from the RM's own full-text preference inside the policy-accuracy run "
               "('in-run', same items and condition)",
    "best_summary": "the benchmark summary with the highest Spearman rho (then Kendall tau-b) against the setting",
    "cross_benchmark": "per downstream setting compared with two or more benchmarks (data x condition): the benchmark "
                       "with the highest NDCG, weighted tau, Spearman and RBO, and the one best on most of them "
                       "(ties: Spearman); point values decide, CIs and permutation p-values say how firmly",
    "items_multi_response": "benchmarks whose items hold several responses (RewardBench 2, RM-Bench) count each item "
                            "once, by its format's rule (prbench.metrics.collapse_items)",
}


# --------------------------------------------------------------------------- loading


def is_eval_summary(s: Any) -> bool:
    """An `evaluate` summary (not a policy-accuracy, build or downstream one), by its run kind."""
    return run_kind(s) == "eval"


def is_policy_accuracy_summary(s: Any) -> bool:
    """A `downstream.policy_accuracy` summary (it has its own RM, policy and per-pair credits)."""
    return run_kind(s) == "policy-accuracy"


def _summary_files(paths: Sequence[str | Path]) -> list[Path]:
    """summary.json files at or below each path (a summary file itself is taken as is)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            out.append(p if p.name == "summary.json" else p.parent / "summary.json")
        elif p.is_dir():
            out.extend(sorted(p.rglob("summary.json")))
        else:
            raise PrbenchError(f"{p}: no such file or folder")
    return [p for p in dict.fromkeys(out) if p.is_file()]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    import json

    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass
class EvalRun:
    """One eval run folder: summary plus per-pair records."""

    path: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def key(self) -> str:
        return str(self.summary.get("spec") or self.summary["model"])

    @property
    def aliases(self) -> set[str]:
        return {str(v) for v in (self.summary.get("spec"), self.summary.get("model")) if v}

    @property
    def data(self) -> str:
        return str(self.summary.get("data", "?"))

    @property
    def condition(self) -> str:
        return str(self.summary["condition"])


def load_eval_runs(paths: Sequence[str | Path], conditions: Sequence[str] | None = None) -> list[EvalRun]:
    """Every eval run at or below `paths` (other run kinds are skipped), optionally only some conditions."""
    runs = []
    for sp in _summary_files(paths):
        try:
            s = read_json(sp)
        except ValueError:
            continue
        if not is_eval_summary(s) or (conditions and s["condition"] not in conditions):
            continue
        runs.append(EvalRun(sp.parent, s, _read_jsonl(sp.parent / "examples.jsonl")))
    return runs


@dataclass
class Setting:
    """One downstream setting: per RM, per item outcome values (what the item bootstrap needs)."""

    label: str
    setting: str  # bon | rl | rgd | policy_accuracy
    values: dict[str, dict[str, float]]  # rm -> item id -> value
    k: int | None = None
    max_k: bool = False
    condition: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # rm -> file
    rm_credit: dict[str, dict[str, float]] = field(default_factory=dict)  # policy accuracy: RM's own credits

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "setting": self.setting, "k": self.k, "max_k": self.max_k,
                "condition": self.condition, "params": self.params, "rms": sorted(self.values),
                "n_items": {rm: len(v) for rm, v in sorted(self.values.items())}, "sources": self.sources}


_GROUP_FIELDS = ("condition", "policy", "w", "candidates_k", "chunk", "temperature", "reward_norm", "metric")


def _downstream_sources(paths: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """(downstream.json files, policy-accuracy summary files) at or below `paths`."""
    ds: list[Path] = []
    pa: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            if p.name == "summary.json":
                pa.append(p)
            else:
                ds.append(p)
        elif p.is_dir():
            ds.extend(sorted(p.rglob(DOWNSTREAM_FILE)))
            pa.extend(sorted(p.rglob("summary.json")))
        else:
            raise PrbenchError(f"{p}: no such file or folder")
    pa_ok = []
    for sp in dict.fromkeys(pa):
        try:
            if is_policy_accuracy_summary(read_json(sp)):
                pa_ok.append(sp)
        except ValueError:
            continue
    return list(dict.fromkeys(ds)), pa_ok


def _label(setting: str, parts: Mapping[str, Any]) -> str:
    out = SETTING_NAMES.get(setting, setting)
    extras = []
    parts = {**parts, "k_top": parts.get("k_top", parts.get("candidates_k"))}
    for name in ("w", "k_top", "mode", "metric"):
        v = parts.get(name)
        if v is not None and not (name == "metric" and v == "grade"):
            extras.append(f"{'k' if name == 'k_top' else name}={v:g}" if isinstance(v, float) else
                          f"{'k' if name == 'k_top' else name}={v}")
    if extras:
        out += " " + " ".join(extras)
    if parts.get("condition"):
        out += f" [{parts['condition']}]"
    return out


def load_settings(paths: Sequence[str | Path], *, bon_curve: str = "expected", pa_metric: str = "total",
                  bon_k: str = "all") -> tuple[list[Setting], list[str]]:
    """Downstream settings found at `paths`, grouped by setting and its parameters; plus notes.

    Best-of-N gives one setting per k shared by its RMs (`bon_k="all"`) or only the largest (`"max"`).
    """
    if bon_k not in ("all", "max"):
        raise PrbenchError(f"bon_k must be 'all' or 'max', got {bon_k!r}")
    if bon_curve not in ("expected", "first_k"):
        raise PrbenchError(f"bon_curve must be 'expected' or 'first_k', got {bon_curve!r}")
    if pa_metric not in ("total", "normalized"):
        raise PrbenchError(f"pa_metric must be 'total' or 'normalized', got {pa_metric!r}")
    ds_files, pa_files = _downstream_sources(paths)
    notes: list[str] = []
    groups: dict[tuple, list[tuple[Path, DownstreamResult]]] = {}
    for f in ds_files:
        try:
            res = read_downstream(f)
        except PrbenchError as exc:
            notes.append(f"skipped {f}: {exc}")
            continue
        parts = {name: res.extra.get(name) for name in _GROUP_FIELDS}
        key = (res.setting, res.grader, res.scale, tuple(sorted((k, repr(v)) for k, v in parts.items())))
        groups.setdefault(key, []).append((f, res))
    settings: list[Setting] = []
    for (setting, grader, scale, _), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        by_rm: dict[str, tuple[Path, DownstreamResult]] = {}
        for f, res in members:
            if res.rm in by_rm:
                notes.append(f"{setting}: {res.rm} appears twice ({by_rm[res.rm][0]} and {f}); using {f}")
            by_rm[res.rm] = (f, res)
        first = members[0][1]
        parts = {name: first.extra.get(name) for name in _GROUP_FIELDS}
        params = {"grader": grader, "scale": scale, **{k: v for k, v in parts.items() if v is not None}}
        sources = {rm: str(f) for rm, (f, _) in sorted(by_rm.items())}
        if setting == "bon":
            ks = sorted(set.intersection(*(set(r.k) for _, r in by_rm.values())))
            if not ks:
                notes.append(f"BoN [{parts.get('condition')}]: the RMs share no k value")
                continue
            for kk in ks if bon_k == "all" else ks[-1:]:
                vals = {}
                for rm, (_, r) in by_rm.items():
                    table = r.per_item if bon_curve == "expected" else r.extra.get("per_item_first_k")
                    if not isinstance(table, Mapping):
                        notes.append(f"{rm}: BoN file has no per-item {bon_curve} values; left out")
                        continue
                    vals[rm] = {str(i): float(v[str(kk)]) for i, v in table.items() if str(kk) in v}
                label = _label("bon", parts).replace("BoN", f"BoN k={kk}" + (" (max)" if kk == ks[-1] else ""), 1)
                settings.append(Setting(label, "bon", vals, k=kk, max_k=kk == ks[-1],
                                        condition=parts.get("condition"),
                                        params={**params, "curve": bon_curve}, sources=sources))
        else:
            vals = {rm: r.item_values() for rm, (_, r) in by_rm.items()}
            settings.append(Setting(_label(setting, parts), setting, vals, condition=parts.get("condition"),
                                    params=params, sources=sources))
    settings.extend(_policy_accuracy_settings(pa_files, pa_metric, notes))
    _dedupe_labels(settings)
    return settings, notes


def _policy_accuracy_settings(files: Sequence[Path], pa_metric: str, notes: list[str]) -> list[Setting]:
    """Group policy-accuracy runs by (policy, data, condition, w, k, mode, ...): one setting per group."""
    key_fields = ("policy", "data", "condition", "w", "k", "mode", "reward_norm", "repetition_penalty")
    groups: dict[tuple, dict[str, tuple[Path, dict[str, Any]]]] = {}
    for sp in files:
        s = read_json(sp)
        if not s.get("rm"):
            notes.append(f"{sp.parent}: policy accuracy without an RM (w = 0, the plain policy) is not ranked")
            continue
        key = tuple(repr(s.get(f)) for f in key_fields)
        groups.setdefault(key, {})[str(s["rm"])] = (sp, s)
    credit_key = "credit_total" if pa_metric == "total" else "credit_norm"
    out = []
    for _, members in sorted(groups.items()):
        first = next(iter(members.values()))[1]
        vals: dict[str, dict[str, float]] = {}
        own: dict[str, dict[str, float]] = {}
        for rm, (sp, _) in members.items():
            recs = _read_jsonl(sp.parent / "examples.jsonl")
            vals[rm] = {str(r["id"]): float(r[credit_key]) for r in recs if r.get(credit_key) is not None}
            own[rm] = {str(r["id"]): float(r["rm_credit"]) for r in recs if r.get("rm_credit") is not None}
        parts = {"w": first.get("w"), "k_top": first.get("k"), "mode": first.get("mode"),
                 "condition": first.get("condition")}
        params = {f: first.get(f) for f in key_fields}
        params["value"] = f"policy accuracy ({pa_metric})"
        out.append(Setting(_label("policy_accuracy", parts), "policy_accuracy", vals,
                           condition=first.get("condition"), params=params,
                           sources={rm: str(sp.parent) for rm, (sp, _) in sorted(members.items())},
                           rm_credit={rm: v for rm, v in own.items() if v}))
    return out


def _dedupe_labels(settings: list[Setting]) -> None:
    """Settings that differ only in unlabelled parameters get #2, #3 ... so labels stay unique."""
    seen: dict[str, int] = {}
    for s in settings:
        n = seen.get(s.label, 0) + 1
        seen[s.label] = n
        if n > 1:
            s.label = f"{s.label} #{n}"


# --------------------------------------------------------------------------- statistics


def _clean(v: Any) -> Any:
    """NaN/inf -> None so JSON stays valid and 'undefined' reads as such."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return _clean(v.item())
    return v


def _metric_fns(ids: Sequence[Hashable], p: float, k: int | None) -> dict[str, Callable[[np.ndarray, np.ndarray], float]]:
    """The rank metrics of metrics.RANK_METRICS as f(x, y), with this run's RBO p and NDCG k."""
    return {
        "spearman": metrics.spearman,
        "kendall_tau_b": metrics.kendall_tau_b,
        "weighted_tau": metrics.weighted_tau,
        "pearson": metrics.pearson,
        "ndcg": lambda x, y: metrics.ndcg(x, y, k=k),
        "rbo": lambda x, y: metrics.rbo_scores(x, y, ids, p=p),
    }


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
    fns = _metric_fns(ids, p, k)
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


def _bench_side(runs: Mapping[str, EvalRun], rms: Sequence[str], summary: str) -> _Side | None:
    """Benchmark item matrix for `summary`; None when an RM lacks what the summary needs (margins)."""
    field_name = "margin" if summary == "mean_margin" else "credit"
    tables = []
    cats: dict[str, str] = {}
    for rm in rms:
        t = {}
        # Multi-response items (RewardBench 2, RM-Bench) count once, by their rule; margins stay per pair.
        records = runs[rm].records if summary == "mean_margin" else metrics.collapse_items(runs[rm].records)
        for r in records:
            if r.get("credit") is None or r.get(field_name) is None:
                continue
            t[str(r["id"])] = float(r[field_name])
            cats.setdefault(str(r["id"]), str(r.get("category", "?")))
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
               opts: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
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
    return {name: {"value": _clean(boot[name]["value"]), "ci_low": _clean(boot[name]["ci_low"]),
                   "ci_high": _clean(boot[name]["ci_high"]), "p_value": _clean(perm[name]["p_value"])}
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


def _row(group_key: tuple[str, str], runs: Mapping[str, EvalRun], setting: Setting,
         opts: Mapping[str, Any]) -> dict[str, Any]:
    """One benchmark x setting row: aligned RMs, items, resampling, metrics, summary comparison."""
    data, condition = group_key
    alias: dict[str, str] = {}
    for key, run in runs.items():
        for a in run.aliases:
            alias.setdefault(a, key)
    down_vals = {alias[rm]: v for rm, v in setting.values.items() if rm in alias}
    rms = sorted(set(runs) & set(down_vals))
    row: dict[str, Any] = {
        "benchmark": {"data": data, "condition": condition, "label": f"{data} [{condition}]",
                      "summary": opts["summary"]},
        "setting": {"label": setting.label, "setting": setting.setting, "k": setting.k, "max_k": setting.max_k,
                    "condition": setting.condition},
        "n_rms": len(rms), "rms": rms,
        "unmatched_downstream_rms": sorted(rm for rm in setting.values if rm not in alias),
        "metrics": None, "by_summary": {}, "best_summary": None, "note": None,
    }
    if len(rms) < opts["min_rms"]:
        row["note"] = (f"needs at least {opts['min_rms']} RMs with both benchmark and downstream results, "
                       f"got {len(rms)}" + (f" ({', '.join(rms)})" if rms else ""))
        return row
    down = _downstream_side(down_vals, rms)
    if down is None:
        row["note"] = "the RMs share no downstream item"
        return row
    sides = {s: _bench_side(runs, rms, s) for s in SUMMARIES}
    primary = sides[opts["summary"]]
    if primary is None:
        row["note"] = (f"benchmark summary {opts['summary']!r} is not available for every RM (an RM without valid "
                       "per-item records, no item valid for all RMs, or margins asked of a pairwise judge)")
        return row
    joint, shared = _pairing(primary, down, opts["pairing"], opts["joint_min_share"])
    if opts["pairing"] == "joint" and not shared:
        row["note"] = "pairing='joint' but benchmark and downstream share no item id"
        return row
    b_side, d_side = (_restrict(primary, shared), _restrict(down, shared)) if joint else (primary, down)
    row.update({
        "resampling": "joint" if joint else "independent",
        "n_items_benchmark": len(b_side.items), "n_items_downstream": len(d_side.items),
        "n_items_shared": len(shared),
        "benchmark_scores": {rm: _clean(float(v)) for rm, v in zip(rms, _summary_values(b_side, opts["summary"]))},
        "downstream_scores": {rm: _clean(float(v)) for rm, v in zip(rms, d_side.matrix.mean(axis=1))},
    })
    row["metrics"] = _agreement(b_side, d_side, opts["summary"], rms, joint, opts)
    y = d_side.matrix.mean(axis=1)
    for name, side in sides.items():
        if side is None:
            row["by_summary"][name] = None
            continue
        if joint:
            if not set(shared) <= set(side.items):
                row["by_summary"][name] = None
                continue
            side = _restrict(side, shared)
        x = _summary_values(side, name)
        row["by_summary"][name] = {"spearman": _clean(metrics.spearman(x, y)),
                                   "kendall_tau_b": _clean(metrics.kendall_tau_b(x, y)),
                                   "scores": {rm: _clean(float(v)) for rm, v in zip(rms, x)}}
    ranked = [(n, v) for n, v in row["by_summary"].items() if v and v["spearman"] is not None]
    if ranked:
        row["best_summary"] = max(ranked, key=lambda nv: (nv[1]["spearman"], nv[1]["kendall_tau_b"] or -2.0))[0]
    return row


def _paper_b(rows: Sequence[dict[str, Any]], settings: Sequence[Setting], opts: Mapping[str, Any]) -> list[dict]:
    """Kendall tau-b between RM accuracy and policy accuracy: benchmark-based and in-run."""
    out = []
    for row in rows:
        if row["setting"]["setting"] != "policy_accuracy":
            continue
        kt = (row["metrics"] or {}).get("kendall_tau_b")
        out.append({"source": "benchmark", "benchmark": row["benchmark"]["label"], "setting": row["setting"]["label"],
                    "n_rms": row["n_rms"], "kendall_tau_b": kt, "note": row["note"]})
    for s in settings:
        if s.setting != "policy_accuracy" or not s.rm_credit:
            continue
        rms = sorted(set(s.rm_credit) & set(s.values))
        entry: dict[str, Any] = {"source": "in-run", "benchmark": "RM preference inside the policy-accuracy run",
                                 "setting": s.label, "n_rms": len(rms), "kendall_tau_b": None, "note": None}
        if len(rms) < opts["min_rms"]:
            entry["note"] = f"needs at least {opts['min_rms']} RMs with full-text RM preferences, got {len(rms)}"
        else:
            x_side = _downstream_side(s.rm_credit, rms)
            y_side = _downstream_side(s.values, rms)
            shared = sorted(set(x_side.items) & set(y_side.items)) if x_side and y_side else []
            if not shared:
                entry["note"] = "no item has both an RM preference and a policy preference for every RM"
            else:
                res = _agreement(_restrict(x_side, shared), _restrict(y_side, shared), "mean", rms, True, opts)
                entry["kendall_tau_b"] = res["kendall_tau_b"]
                entry["spearman"] = res["spearman"]
                entry["n_items"] = len(shared)
        out.append(entry)
    return out


def _summary_comparison(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which benchmark summary tracks downstream best, compared on the same rows.

    Means are taken over the rows where every compared summary has a Spearman value (a summary
    available on fewer rows, e.g. margins without pairwise judges, would otherwise be averaged
    over a different, easier set). If no row has them all, the summary available on the fewest
    rows is left out until some rows are common. `best_in_rows` counts per-row wins over all rows.
    """
    def val(r: Mapping[str, Any], name: str, metric: str) -> float | None:
        v = (r.get("by_summary") or {}).get(name)
        return v.get(metric) if v else None

    compared = [n for n in SUMMARIES if any(val(r, n, "spearman") is not None for r in rows)]
    common: list[Mapping[str, Any]] = []
    while compared:
        common = [r for r in rows if all(val(r, n, "spearman") is not None for n in compared)]
        if common:
            break
        compared.remove(min(compared, key=lambda n: sum(val(r, n, "spearman") is not None for r in rows)))
    overall: dict[str, dict[str, Any]] = {}
    for name in SUMMARIES:
        sp = [val(r, name, "spearman") for r in common] if name in compared else []
        kt = [v for v in (val(r, name, "kendall_tau_b") for r in common) if v is not None] if name in compared else []
        overall[name] = {"mean_spearman": float(np.mean(sp)) if sp else None,
                         "mean_kendall_tau_b": float(np.mean(kt)) if kt else None, "n_rows": len(sp),
                         "n_rows_available": sum(val(r, name, "spearman") is not None for r in rows),
                         "best_in_rows": sum(1 for r in rows if r.get("best_summary") == name)}
    ranked = [(n, v) for n, v in overall.items() if v["mean_spearman"] is not None]
    best = max(ranked, key=lambda nv: (nv[1]["mean_spearman"], nv[1]["mean_kendall_tau_b"] or -2.0))[0] if ranked else None
    return {"overall": overall, "best": best, "compared": compared, "n_common_rows": len(common),
            "rule": "highest mean Spearman rho over the benchmark x setting rows where every compared summary is "
                    "defined (ties: mean Kendall tau-b); point values, no CI: a hint, not a test"}


CROSS_METRICS: tuple[str, ...] = ("ndcg", "weighted_tau", "spearman", "rbo")


def cross_benchmark(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per downstream setting: every benchmark's rank agreement, and which one tracks it best.

    One entry per setting (Best-of-N at its largest k) that at least two benchmarks (data x
    condition) were compared with. `best[metric]` is the benchmark with the highest value of
    that metric (ties: the first in label order); `best_overall` the one best on most of
    NDCG, weighted tau, Spearman and RBO (ties: higher Spearman). `same_rms` says whether every
    benchmark was compared over the same RMs (else the values rank different RM sets).
    Point values decide; the CIs and permutation p-values beside them say how firmly.
    """
    by_setting: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["setting"]["setting"] == "bon" and not r["setting"]["max_k"]:
            continue
        by_setting.setdefault(r["setting"]["label"], []).append(r)
    out = []
    for label, rs in by_setting.items():
        if len({r["benchmark"]["label"] for r in rs}) < 2:
            continue
        entries = [{"benchmark": r["benchmark"]["label"], "data": r["benchmark"]["data"],
                    "condition": r["benchmark"]["condition"], "n_rms": r["n_rms"], "rms": r["rms"],
                    "metrics": {m: (r["metrics"] or {}).get(m) for m in CROSS_METRICS} if r["metrics"] else None,
                    "note": r["note"]} for r in sorted(rs, key=lambda r: r["benchmark"]["label"])]
        best: dict[str, str | None] = {}
        for m in CROSS_METRICS:
            scored = [(e["metrics"][m]["value"], e["benchmark"]) for e in entries
                      if e["metrics"] and e["metrics"][m] and e["metrics"][m]["value"] is not None]
            top = max((v for v, _ in scored), default=None)
            best[m] = next((b for v, b in scored if v == top), None) if scored else None
        wins = {e["benchmark"]: sum(1 for m in CROSS_METRICS if best[m] == e["benchmark"]) for e in entries}

        def spearman_of(e: Mapping[str, Any]) -> float:
            v = (e["metrics"] or {}).get("spearman") or {}
            return v.get("value") if v.get("value") is not None else -2.0

        ranked = sorted((e for e in entries if e["metrics"]), key=lambda e: (-wins[e["benchmark"]], -spearman_of(e)))
        out.append({"setting": label, "benchmarks": entries, "best": best,
                    "best_overall": ranked[0]["benchmark"] if ranked and wins[ranked[0]["benchmark"]] else None,
                    "wins": wins, "same_rms": len({tuple(e["rms"]) for e in entries}) == 1})
    return out


# --------------------------------------------------------------------------- public API


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
    match_condition: bool = False,
    pairing: str = "auto",
    joint_min_share: float = 0.9,
    bon_curve: str = "expected",
    bon_k: str = "all",
    pa_metric: str = "total",
    ci: float = 0.95,
    min_rms: int = MIN_RMS,
) -> dict[str, Any]:
    """Rank agreement between benchmark summaries and downstream outcomes over RMs (module docstring).

    `benchmark_runs`: run roots or run folders; `downstream`: downstream.json files or folders
    (policy-accuracy run folders found there count as a downstream setting). `conditions`
    keeps only benchmarks of these conditions; `match_condition` pairs a benchmark condition
    only with downstream settings run under the same condition (or none stated). `bon_k="max"`
    skips the Best-of-N rows below the largest k (each row costs n_boot + n_perm metric passes).
    Returns a JSON-ready dict: parameters, definitions, benchmarks, settings, rows, paper_b,
    summary_comparison, notes.
    """
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
    conds = [conditions] if isinstance(conditions, str) else (list(conditions) if conditions else None)
    runs = load_eval_runs(benchmark_runs, conds)
    settings, notes = load_settings(downstream, bon_curve=bon_curve, pa_metric=pa_metric, bon_k=bon_k)
    opts = {"summary": summary, "seed": seed, "n_boot": n_boot, "n_perm": n_perm, "p": p, "k": k, "ci": ci,
            "pairing": pairing, "joint_min_share": joint_min_share, "min_rms": min_rms}
    groups: dict[tuple[str, str], dict[str, EvalRun]] = {}
    for run in runs:
        g = groups.setdefault((run.data, run.condition), {})
        if run.key in g:
            notes.append(f"{run.data} [{run.condition}]: two runs of {run.key} ({g[run.key].path} and {run.path}); "
                         f"using {run.path}")
        g[run.key] = run
    if not runs:
        notes.append("no eval runs found" + (f" for conditions {', '.join(conds)}" if conds else ""))
    if not settings:
        notes.append("no downstream results found (downstream.json files or policy-accuracy runs)")
    rows = []
    for gkey in sorted(groups):
        for s in settings:
            if match_condition and s.condition and s.condition != gkey[1]:
                continue
            rows.append(_row(gkey, groups[gkey], s, opts))
    return {
        "format": FORMAT_VERSION,
        "prbench": __version__,
        "parameters": {**opts, "conditions": conds, "match_condition": match_condition, "bon_curve": bon_curve,
                       "bon_k": bon_k, "pa_metric": pa_metric, "metrics": list(metrics.RANK_METRICS),
                       "benchmark_runs": [str(x) for x in benchmark_runs], "downstream": [str(x) for x in downstream]},
        "defaults": {"summary": "mean", "seed": 0, "n_boot": 1000, "n_perm": 1000, "p": 0.9, "k": None, "ci": 0.95,
                     "pairing": "auto", "joint_min_share": 0.9, "bon_curve": "expected", "bon_k": "all",
                     "pa_metric": "total",
                     "min_rms": MIN_RMS, "match_condition": False},
        "definitions": {
            **{name: metrics.METRIC_DEFINITIONS[name] for name in (*metrics.RANK_METRICS, "p_value")},
            **{f"summary.{n}": d for n, d in SUMMARY_DEFINITIONS.items()},
            **EXTRA_DEFINITIONS,
            "note": "definitions state library defaults (1000 permutations, p=0.9, all RMs for NDCG); "
                    "the values used here are under 'parameters'",
        },
        "benchmarks": [{"label": f"{d} [{c}]", "data": d, "condition": c, "rms": sorted(g),
                        "runs": {rm: str(r.path) for rm, r in sorted(g.items())}} for (d, c), g in sorted(groups.items())],
        "settings": [s.describe() for s in settings],
        "rows": rows,
        "paper_b": _paper_b(rows, settings, opts),
        "summary_comparison": _summary_comparison(rows),
        "cross_benchmark": cross_benchmark(rows),
        "notes": notes,
    }


# --------------------------------------------------------------------------- output


def fmt_ci(m: Mapping[str, Any] | None, digits: int = 3) -> str:
    """'value [lo, hi]' (or '-' when undefined), the cell format of the paper-style table."""
    if not m or m.get("value") is None:
        return "-"
    v = f"{m['value']:.{digits}f}"
    if m.get("ci_low") is None or m.get("ci_high") is None:
        return v
    return f"{v} [{m['ci_low']:.{digits}f}, {m['ci_high']:.{digits}f}]"


def main_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows of the headline table: BoN only at its largest k, every other setting as is."""
    return [r for r in result["rows"] if r["setting"]["setting"] != "bon" or r["setting"]["max_k"]]


def _md_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    head = ["benchmark", "setting", "RMs", *[label for _, label in PAPER_COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|" + "---:|" * len(PAPER_COLUMNS)]
    for r in rows:
        cells = [r["benchmark"]["label"], r["setting"]["label"], str(r["n_rms"])]
        if r["metrics"] is None:
            cells += ["-"] * len(PAPER_COLUMNS)
        else:
            cells += [fmt_ci(r["metrics"][name]) for name, _ in PAPER_COLUMNS]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def meta_markdown(result: Mapping[str, Any]) -> str:
    """The paper-shaped table (value [95% CI]), per-k BoN, paper B's number, summary comparison, notes."""
    prm = result["parameters"]
    out = [f"# Meta-evaluation (benchmark summary: {prm['summary']})", "",
           (f"Rank agreement over RMs between benchmark and downstream scores. Cells: value [{int(prm['ci'] * 100)}% "
            f"CI], item bootstrap with {prm['n_boot']} resamples (joint when both sides share items, else "
            f"independent); RBO p={prm['p']}, NDCG {'@' + str(prm['k']) if prm['k'] else 'over all RMs'}, "
            f"seed {prm['seed']}."), ""]
    rows = main_rows(result)
    out += _md_table(rows) if rows else ["(no benchmark x downstream pairs)"]
    bon_k = [r for r in result["rows"] if r["setting"]["setting"] == "bon" and not r["setting"]["max_k"]]
    if bon_k:
        out += ["", "## Best-of-N at every k", ""] + _md_table([r for r in result["rows"]
                                                               if r["setting"]["setting"] == "bon"])
    out += ["", "## Permutation p-values (one-sided, agreement better than chance)", "",
            "| benchmark | setting | " + " | ".join(label for _, label in PAPER_COLUMNS) + " |",
            "|---|---|" + "---:|" * len(PAPER_COLUMNS)]
    for r in rows:
        ps = ["-" if r["metrics"] is None or r["metrics"][n]["p_value"] is None else f"{r['metrics'][n]['p_value']:.3f}"
              for n, _ in PAPER_COLUMNS]
        out.append(f"| {r['benchmark']['label']} | {r['setting']['label']} | " + " | ".join(ps) + " |")
    if result["paper_b"]:
        out += ["", "## RM accuracy vs policy accuracy (paper B: Kendall tau 0.08-0.31)", "",
                "| RM accuracy from | setting | RMs | Kendall tau-b |", "|---|---|---:|---:|"]
        for e in result["paper_b"]:
            kt = e["kendall_tau_b"]
            cell = (fmt_ci(kt) if kt and kt.get("value") is not None else
                    e["note"] or ("undefined (constant scores)" if kt else "-"))
            out.append(f"| {e['benchmark']} | {e['setting']} | {e['n_rms']} | {cell} |")
    if result.get("cross_benchmark"):
        out += ["", "## Which benchmark ranks the RMs most like each downstream setting", "",
                "Cells: value [CI] (permutation p). Best per metric in bold; 'best overall' is best on most metrics.",
                ""]
        out += cross_benchmark_markdown(result["cross_benchmark"])
    comp = result["summary_comparison"]
    out += ["", "## Which benchmark summary predicts downstream best", "",
            "| summary | mean Spearman | mean Kendall | common rows | rows with a value | best in rows |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, v in comp["overall"].items():
        sp = "-" if v["mean_spearman"] is None else f"{v['mean_spearman']:.3f}"
        kt = "-" if v["mean_kendall_tau_b"] is None else f"{v['mean_kendall_tau_b']:.3f}"
        out.append(f"| {name} | {sp} | {kt} | {v['n_rows']} | {v['n_rows_available']} | {v['best_in_rows']} |")
    out += ["", f"Best: {comp['best'] or '-'} ({comp['rule']})."]
    notes = [r for r in result["rows"] if r["note"]]
    if notes or result["notes"]:
        out += ["", "## Notes", ""]
        out += [f"- {r['benchmark']['label']} x {r['setting']['label']}: {r['note']}" for r in notes]
        out += [f"- {n}" for n in result["notes"]]
    out += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in result["definitions"].items()]
    return "\n".join(out) + "\n"


CROSS_LABELS = {"ndcg": "NDCG", "weighted_tau": "weighted tau", "spearman": "Spearman", "rbo": "RBO"}


def cross_benchmark_markdown(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cross-benchmark table: one block per downstream setting, one line per benchmark."""
    lines: list[str] = []
    for c in entries:
        lines += [f"### {c['setting']}: best overall {c['best_overall'] or '-'}"
                  + ("" if c["same_rms"] else " (benchmarks compared over different RM sets)"), "",
                  "| benchmark | RMs | " + " | ".join(CROSS_LABELS[m] for m in CROSS_METRICS) + " |",
                  "|---|---:|" + "---:|" * len(CROSS_METRICS)]
        for e in c["benchmarks"]:
            cells = []
            for m in CROSS_METRICS:
                v = (e["metrics"] or {}).get(m)
                cell = fmt_ci(v) + (f" (p {v['p_value']:.3f})" if v and v.get("p_value") is not None else "")
                cells.append(f"**{cell}**" if c["best"][m] == e["benchmark"] else cell)
            if e["metrics"] is None:
                cells = [e["note"] or "-"] + [""] * (len(CROSS_METRICS) - 1)
            lines.append(f"| {e['benchmark']} | {e['n_rms']} | " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        lines.append("")
    return lines


def write_csv(result: Mapping[str, Any], path: Path) -> Path:
    """One line per benchmark x setting x summary... x metric columns (value, ci_low, ci_high, p_value)."""
    head = ["benchmark_data", "benchmark_condition", "summary", "setting_label", "setting", "k", "max_k",
            "setting_condition", "n_rms", "rms", "n_items_benchmark", "n_items_downstream", "n_items_shared",
            "resampling", "best_summary"]
    for name in metrics.RANK_METRICS:
        head += [name, f"{name}_ci_low", f"{name}_ci_high", f"{name}_p_value"]
    head.append("note")
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in result["rows"]:
            line = [r["benchmark"]["data"], r["benchmark"]["condition"], r["benchmark"]["summary"],
                    r["setting"]["label"], r["setting"]["setting"], r["setting"]["k"], r["setting"]["max_k"],
                    r["setting"]["condition"], r["n_rms"], ";".join(r["rms"]), r.get("n_items_benchmark"),
                    r.get("n_items_downstream"), r.get("n_items_shared"), r.get("resampling"), r.get("best_summary")]
            for name in metrics.RANK_METRICS:
                m = (r["metrics"] or {}).get(name) or {}
                line += [m.get("value"), m.get("ci_low"), m.get("ci_high"), m.get("p_value")]
            line.append(r["note"])
            w.writerow(line)
    return path


def write_meta(result: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """meta.json (everything), meta.csv (one line per row) and meta.md (the paper-shaped table)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "meta.json", result)
    write_csv(result, out / "meta.csv")
    (out / "meta.md").write_text(meta_markdown(result), encoding="utf-8")
    return {"json": out / "meta.json", "csv": out / "meta.csv", "md": out / "meta.md"}
