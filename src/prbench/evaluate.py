"""Run a reward model over a benchmark under one input condition: per-example records + metrics.

Tie rule: a pointwise RM that gives chosen and rejected exactly equal scores earns 0.5; a
pairwise judge's explicit tie earns 0.5. Invalid outputs (NaN/inf scores, failed calls,
unparseable verdicts) are counted as invalid and excluded from `accuracy`; they are never
turned into a tie or a side. `accuracy_invalid_as_wrong` counts them as 0 for a conservative view.
"""

from __future__ import annotations

import inspect
import json
import platform
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from prbench import __version__, interrupt, metrics
from prbench.cache import Cache, NullCache
from prbench.conditions import build_view, read_planner_file
from prbench.config import EvalSettings
from prbench.data import iter_examples
from prbench.data.loaders import take_items
from prbench.errors import PrbenchError
from prbench.fingerprint import spec_digest
from prbench.records import stamp
from prbench.retrieval import load_retriever
from prbench.rewards.base import (
    RewardModel,
    capabilities,
    load_rm,
)
from prbench.runs import RunDir, refuse_secrets, slug
from prbench.schema import Example
from prbench.scoring import SIDE_CREDIT, chosen_first, chunk_records, example_seed, score_cached  # noqa: F401


@dataclass
class EvalConfig:
    """Everything that determines a run's results (batch_size does not, by design)."""

    model: str
    data: str
    condition: str = "none"
    seed: int = 0
    limit: int | None = None
    categories: list[str] | None = None
    split: str = "test"
    top_k: int = 10
    retriever: str = "bm25"
    max_context_chars: int | None = None
    planner_file: str | None = None
    both_orders: bool = False
    model_options: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 16
    n_boot: int = 1000


@dataclass
class EvalResult:
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    path: Path | None = None
    reused: bool = False  # finished earlier: returned from the folder, nothing scored now


class InvalidRunError(PrbenchError):
    """A run that finished but cannot be trusted: too many invalid records (exit 1, not a usage error)."""

    exit_code = 1


def invalid_failure(summary: dict[str, Any], max_invalid: float | None = 1.0,
                    records: Sequence[dict[str, Any]] = ()) -> str | None:
    """Why a finished run fails its invalid bound (None if it passes).

    Every record invalid always fails (a dead endpoint must not look like a result); beyond that,
    the share of invalid records may not exceed `max_invalid` (1.0: no bound).
    """
    m = summary.get("metrics", summary)
    total, bad = m.get("n_total") or 0, m.get("n_invalid") or 0
    name = f"{summary.get('model')} [{summary.get('condition')}]"
    if total and bad == total:
        reason = next((str(r["invalid"])[:200] for r in records if r.get("invalid")), None)
        return f"{name}: all {total} records are invalid" + (f" (first: {reason})" if reason else "")
    if max_invalid is not None and total and bad / total > max_invalid:
        return f"{name}: {bad} of {total} records are invalid ({100 * bad / total:.1f}% > --max-invalid {max_invalid:g})"
    return None


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"prbench": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "vllm", "openai"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def summarize(records: Sequence[dict[str, Any]], *, seed: int, n_boot: int = 1000) -> dict[str, Any]:
    """Metrics from per-example records (so a summary can always be recomputed from the file)."""
    pairs, records = records, metrics.collapse_items(records)  # multi-response items: one credit each
    shares = any("item" in r for r in pairs)  # item credits under a rule may be any share in [0, 1]
    valid = [r for r in records if r.get("credit") is not None]
    credits = np.array([r["credit"] for r in valid], dtype=float)
    acc = metrics.accuracy_summary(credits, seed=seed, n_boot=n_boot, shares=shares)
    by_cat: dict[str, list[float]] = {}
    for r in valid:
        by_cat.setdefault(r["category"], []).append(r["credit"])
    out: dict[str, Any] = {
        **acc,
        "n_total": len(records),
        "n_invalid": len(records) - len(valid),
        "accuracy_invalid_as_wrong": float(credits.sum() / len(records)) if records else None,
        "categories": metrics.macro_micro({k: np.array(v) for k, v in sorted(by_cat.items())}, seed, n_boot=n_boot,
                                          shares=shares),
    }
    decisive = [r for r in valid if r["longer"] != "equal" and r["credit"] != 0.5]
    out["length_bias"] = {
        "prefers_longer": (float(np.mean([(r["credit"] == 1.0) == (r["longer"] == "chosen") for r in decisive]))
                           if decisive else None),
        "n": len(decisive),
    }
    margins = [r["margin"] for r in valid if "margin" in r]
    if margins:
        out["mean_margin"] = float(np.mean(margins))
    trunc = [r["truncated"] for r in pairs]
    out["truncated_inputs"] = int(sum(sum(t.values()) if isinstance(t, dict) else bool(t) for t in trunc))
    if any("verdicts" in r for r in pairs):
        out["pairwise"] = _pairwise_diagnostics(pairs)
    from prbench.formats import format_score

    if (score := format_score(pairs)) is not None:
        out["format_score"] = score  # the benchmark's own headline (RewardBench sections, RM-Bench grid...)
    return out


def _pairwise_diagnostics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    first = [(r["chosen_position"], r["sides"][0], r["verdicts"][0]) for r in records]

    def acc_when(pos: str) -> float | None:
        vals = [SIDE_CREDIT[s] for p, s, _ in first if p == pos and s is not None]
        return float(np.mean(vals)) if vals else None

    letters = [v for r in records for v in r["verdicts"] if v in ("A", "B")]
    n_verdicts = sum(len(r["verdicts"]) for r in records)
    out = {
        "accuracy_chosen_A": acc_when("A"),
        "accuracy_chosen_B": acc_when("B"),
        "share_verdict_A": float(np.mean([v == "A" for v in letters])) if letters else None,
        "parse_failures": sum(1 for r in records for v in r["verdicts"] if v is None),
        "verdicts": n_verdicts,
    }
    cons = [r["consistent"] for r in records if "consistent" in r]
    if cons:
        out["position_consistency"] = float(np.mean(cons))
    return out


# -- driver ---------------------------------------------------------------------------------
def run_path(out: str | Path, spec: str, data: str, condition: str, options: dict[str, Any] | None = None) -> Path:
    """Folder of one (model, options, data, condition) run: readable names plus short hashes."""
    ident = spec + (json.dumps(options, sort_keys=True, default=str) if options else "")
    data_name = Path(data).name if Path(data).exists() else data
    return Path(out) / slug(data_name) / (slug(spec)[:-7] + "-" + slug(ident)[-6:]) / condition


def evaluate(
    model: str | RewardModel,
    data: str | Sequence[Example] = "sample",
    condition: str | None = None,
    *,
    settings: EvalSettings | None = None,
    out: str | Path | None = None,
    model_options: dict[str, Any] | None = None,
    cache: Cache | None = None,
    overwrite: bool = False,
    retry_failed: bool = False,
    repair: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    **given: Any,
) -> EvalResult:
    """Evaluate one RM under one condition. With `out`, results go to a resumable run folder.

    `model` is a spec string (loaded only if some example still needs scoring, so a finished
    run costs no model load) or a ready RewardModel (reused across conditions). `settings`
    (or `given` keywords on top of it, `condition` too) are `EvalSettings`. With `workers` > 1 or a
    `ray_address`, chunks are scored by Ray actors (spec strings only).
    """
    s = EvalSettings.build(settings, **given, **({} if condition is None else {"condition": condition}))
    t0 = time.time()
    options = dict(model_options or {})
    refuse_secrets(options)
    try:  # options name the run (its folder, summary and cache identity): plain values only
        json.dumps(options)
    except TypeError as exc:
        raise PrbenchError(f"model_options must be plain values (text, numbers, lists, mappings) because they name "
                           f"the run ({exc}); load the model yourself and pass it instead of its spec") from None
    spec = model if isinstance(model, str) else getattr(model, "name", model.spec)
    data_name = data if isinstance(data, str) else "<in-memory>"
    def stream() -> Iterator[Example]:
        """Examples in order, read lazily: memory stays flat in the number of items."""
        src = (iter_examples(data, categories=s.categories, split=s.split, format=s.format)
               if isinstance(data, str) else iter(data))
        return take_items(src, s.limit)  # items, not pairs: a multi-response item is never cut

    order = {ex.id: i for i, ex in enumerate(stream())}  # pass 1: ids only (validates everything)
    cache = cache if cache is not None else (Cache(namespace="scores") if out else NullCache())
    config = asdict(EvalConfig(model=spec, data=data_name, condition=s.condition, seed=s.seed, limit=s.limit,
                               categories=list(s.categories) if s.categories else None, split=s.split, top_k=s.top_k,
                               retriever=s.retriever, max_context_chars=s.max_context_chars,
                               planner_file=s.planner_file, both_orders=s.both_orders,
                               model_options=options, batch_size=s.batch_size, n_boot=s.n_boot))
    if digest := spec_digest(model if isinstance(model, str) else str(getattr(model, "spec", ""))):
        config["model_digest"] = digest  # retrained into the same folder: a named config change, never old numbers
    if s.format:
        config["format"] = s.format
    identity = {**options, "both_orders": True} if s.both_orders else options  # both orders: another run
    run = RunDir(run_path(out, spec, data_name, s.condition, identity), config, overwrite, repair) if out else None
    if run and retry_failed:
        run.rewrite([r for r in run.records() if r.get("credit") is not None])
    done = run.done_ids() if run else set()
    n_todo = sum(1 for i in order if i not in done)
    previous = run.previous_summary() if run else None  # a damaged summary is recomputed
    if previous and not n_todo and previous.get("n_total") == len(order):
        return EvalResult(previous, run.records(), run.path, reused=True)  # finished earlier: nothing to compute
    if on_progress:
        on_progress(len(order) - n_todo, len(order))  # data read and valid: the count is known before the model loads
    distributed = s.workers > 1 or s.ray_address is not None
    if distributed and not isinstance(model, str):
        raise PrbenchError("workers > 1 needs a model spec string (each Ray actor loads its own copy)")
    rm_options = {"batch_size": s.batch_size, "seed": s.seed, **options}
    rm = None if distributed else (model if isinstance(model, RewardModel) else load_rm(model, **rm_options))
    view_args = {"retriever": load_retriever(s.retriever), "top_k": s.top_k, "seed": s.seed,
                 "planner": read_planner_file(s.planner_file) if s.planner_file else None,
                 "max_context_chars": s.max_context_chars, "cache": Cache(namespace="retrieval") if out and not isinstance(cache, NullCache) else None,
                 # wrong-profile draws donors from every item, so only it holds the whole set
                 "pool": list(stream()) if s.condition.startswith("wrong-") and n_todo else ()}
    step = max(s.batch_size, 1) * 4  # one RM call per append: an interrupt loses at most the call in flight
    todo = (ex for ex in stream() if ex.id not in done)
    chunks = ((part, [build_view(ex, s.condition, **view_args) for ex in part])
              for part in iter(lambda: list(islice(todo, step)), []))
    if distributed:
        from prbench.distributed import ray_chunks

        stream = ray_chunks(str(model), rm_options, chunks, workers=max(s.workers, 1), seed=s.seed,
                            both_orders=s.both_orders, ray_address=s.ray_address, gpus_per_worker=s.gpus_per_worker,
                            use_cache=not isinstance(cache, NullCache))
    else:
        stream = (chunk_records(rm, exs, vs, s.seed, s.both_orders, cache) for exs, vs in chunks)
    fresh: list[dict] = []
    try:
        for recs in stream:
            for r in recs:
                r["condition"] = s.condition
            if run:
                run.append(recs)  # fsynced
            fresh.extend(recs)
            if on_progress:
                on_progress(len(done) + len(fresh), len(order))
    except KeyboardInterrupt as exc:  # SIGINT / SIGTERM: the batch in flight is discarded, the rest is on disk
        where = f" in {run.path}" if run else " (no --out: nothing kept)"
        interrupt.note(exc, f"{len(done) + len(fresh)} of {len(order)} items saved{where}")
        raise
    rm_name = rm.name if rm is not None else spec
    records = run.records() if run else fresh
    in_order = sorted((r for r in records if r["id"] in order), key=lambda r: order[r["id"]])
    if run and in_order != records:
        run.rewrite(in_order)  # retried items go back to their place: same bytes as one clean run
    records = in_order
    m = summarize(records, seed=s.seed, n_boot=s.n_boot)
    summary = stamp("eval", {
        "model": rm_name, "spec": spec, "data": data_name, "condition": s.condition, "seed": s.seed,
        "kind": "pairwise" if any("verdicts" in r for r in records) else "pointwise",
        "capabilities": capabilities(rm if rm is not None else spec).as_dict(),
        "accuracy": m["accuracy"], "n": m["n"], "n_total": len(records), "metrics": m,
        "model_info": ({"fingerprint": rm.fingerprint(), **rm.run_info()} if rm is not None
                       else {"fingerprint": {"spec": spec}, "workers": s.workers, "ray_address": s.ray_address}),
        "versions": _versions(), "wall_time_s": round(time.time() - t0, 3), "resumed_from": len(done),
    })
    from prbench.train.protocol import user_breakdown  # per-user distribution; seen vs unseen users

    summary["per_user"] = user_breakdown(records, rm, seed=s.seed, n_boot=s.n_boot)
    if run:
        from prbench.validity import attach

        # the validity card, once a condition run and its control run sit side by side
        attach(run.path, summary, records, seed=s.seed, n_boot=s.n_boot)
        run.write_summary(summary)
    return EvalResult(summary, records, run.path if run else None)



class _CallableModule(types.ModuleType):
    """`import prbench.evaluate` binds this module as the package attribute `prbench.evaluate`,
    replacing the lazily exported function of the same name; calling the module calls the
    function, so `prbench.evaluate(...)` works whichever was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> EvalResult:
        return evaluate(*args, **kwargs)


__signature__ = inspect.signature(evaluate)
sys.modules[__name__].__class__ = _CallableModule
