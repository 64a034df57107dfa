"""Run a reward model over a benchmark under one input condition: per-example records + metrics.

Tie rule: a pointwise RM that gives chosen and rejected exactly equal scores earns 0.5; a
pairwise judge's explicit tie earns 0.5. Invalid outputs (NaN/inf scores, failed calls,
unparseable verdicts) are counted as invalid and excluded from `accuracy`; they are never
turned into a tie or a side. `accuracy_invalid_as_wrong` counts them as 0 for a conservative view.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice, repeat, takewhile
from pathlib import Path
from typing import Any, cast, overload

import numpy as np

from prbench import cost
from prbench.capabilities.eval.settings import EvalSettings
from prbench.config import run_identity
from prbench.context.conditions import build_view, no_context_failure, read_planner_file, require_fields
from prbench.context.retrieval import load_retriever
from prbench.data import iter_examples
from prbench.data.loaders import take_items
from prbench.engines.batch import ReadOnly
from prbench.engines.providers import engine_provider
from prbench.errors import (
    InvalidRunError,  # noqa: F401  (re-exported: its home before prbench.errors)
    PrbenchError,
)
from prbench.evaluation import validity
from prbench.evaluation.scoring import SIDE_CREDIT, chunk_records
from prbench.evaluation.until import EvalRun, check_until, evaluate_until
from prbench.fingerprint import data_digest, spec_digest
from prbench.registry import REWARDS
from prbench.rewards.base import (
    CheckedOptions,
    RewardModel,
    build_rm,
    capabilities,
    checked_options,
    shown_top_k,
)
from prbench.runtime import interrupt
from prbench.schema import Example
from prbench.specs import ModelSpec, parse_spec
from prbench.stats import metrics
from prbench.store.cache import Cache, NullCache
from prbench.store.records import (
    EvalRecord,
    EvalSummary,
    RunSettings,
    stamp,
    typed_record,
    typed_summary,
)
from prbench.store.runs import RunDir, refuse_secrets, scan_records, slug
from prbench.version import __version__


@dataclass
class EvalResult:
    """What `evaluate` returns for one run (one RM, one condition, one data set)."""

    summary: EvalSummary
    """summary.json as the model every reader validates (`prbench.store.records.EvalSummary`): `accuracy`, `n`,
    `n_total`, `metrics` (CI, per category, invalid counts, length bias, pairwise diagnostics), `per_user`, `model`,
    `spec`, `data`, `condition`, `seed`, versions and wall time (e.g. `res.summary.metrics.ci_low`)."""
    records: list[EvalRecord]
    """One record per pair in benchmark order, as its model (`PointwiseRecord` or `PairwiseRecord`): `id`,
    `category`, `credit` (1, 0, 0.5 for a tie, None when invalid), the scores or verdicts, and what the RM was
    shown (`posts_shown`, `donor`... as extra fields)."""
    path: Path | None = None
    """The run folder (None without `out`)."""
    reused: bool = False
    """Finished earlier: returned from the folder, nothing scored now."""
    written: dict[str, Any] = field(default_factory=dict, repr=False)
    """The summary's object as the driver built it (key order and number types kept; summary.json holds it with
    keys sorted): what `prbench eval --json` prints. Read the typed `summary`."""

    @classmethod
    def of(cls, summary: dict[str, Any], records: Sequence[dict[str, Any]], path: Path | None = None,
           reused: bool = False) -> EvalResult:
        """The result of a run from what was written: the summary and records validated as the readers do."""
        where = (path or Path(".")) / "summary.json"
        typed = typed_summary(summary, where, EvalSummary)
        recs = [typed_record(r, where.with_name("examples.jsonl"), n) for n, r in enumerate(records, 1)]
        return cls(typed, recs, path, reused, summary)


def invalid_failure(summary: EvalSummary | Mapping[str, Any], max_invalid: float | None = 1.0,
                    records: Sequence[EvalRecord] = ()) -> str | None:
    """Why a finished run fails its invalid bound (None if it passes).

    Every record invalid always fails (a dead endpoint must not look like a result); beyond that,
    the share of invalid records may not exceed `max_invalid` (1.0: no bound). A summary given as written
    (a dict) is read through its model first.
    """
    s = summary if isinstance(summary, EvalSummary) else typed_summary(dict(summary), model=EvalSummary)
    total, bad = s.metrics.n_total or 0, s.metrics.n_invalid or 0
    name = f"{s.model} [{s.condition}]"
    if total and bad == total:
        reason = next((str(r.invalid)[:200] for r in records if r.invalid), None)
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
    acc = metrics.accuracy_summary(credits, seed=seed, n_boot=n_boot, shares=shares,
                                   strict=metrics.strict_credits(valid) if shares else None)
    by_cat: dict[str, list[float]] = {}
    for r in valid:
        by_cat.setdefault(r["category"], []).append(r["credit"])
    out: dict[str, Any] = {
        **acc,
        "n_total": len(records),
        "n_boot": n_boot,  # the resamples behind every CI here: a reader recomputes them from the records
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
    if any(r.get("condition", "none") != "none" for r in pairs):  # records the condition found no context for
        out["n_no_context"] = sum(1 for r in pairs if r.get("no_context"))
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
def _donor_pool(data: str | Sequence[Example], s: EvalSettings) -> list[Any]:
    """Every item of the data's split (no --limit, no --categories): the donors of the wrong-* controls."""
    return list(iter_examples(data, split=s.split, format=s.format)) if isinstance(data, str) else list(data)


def _batches(on: bool, rm: RewardModel | None, run: RunDir | None, wait: bool, retry_failed: bool,
             collect: Callable[[], Any]) -> Any:
    """Batch mode's collecting passes (`prbench.engines.batch`), or nothing."""
    from prbench.engines.batch import optional

    if on and (rm is None or run is None):
        raise PrbenchError("--batch needs a run folder (--out) and one process (no --workers / Ray)")
    return optional(on, rm, run.path if run else None, collect, wait=wait, retry_failed=retry_failed)


def run_path(out: str | Path, spec: str, data: str, condition: str, options: dict[str, Any] | None = None) -> Path:
    """Folder of one (model, options, data, condition) run: readable names plus short hashes."""
    ident = spec + (json.dumps(options, sort_keys=True, default=str) if options else "")
    data_name = Path(data).name if Path(data).exists() else data
    return Path(out) / slug(data_name) / (slug(spec)[:-7] + "-" + slug(ident)[-6:]) / condition


class ModelHandle:
    """A model spec whose RM is built when a run needs scoring, one RM per run (its counts are the run's);
    reading back a finished run never builds it. Its options are checked here, once.

    `name` names the run folder and the summary's `spec` (default: the spec). `prbench eval` passes the name the
    built RM will report (`rewards.base.rm_name`), which is what named its folders when it built the RM first.
    """

    def __init__(self, spec: str | ModelSpec, options: Mapping[str, Any] | None = None, *, name: str | None = None):
        self.parsed = spec if isinstance(spec, ModelSpec) else parse_spec(REWARDS, spec)  # parsed once, here or before
        self.spec = self.parsed.spec
        self.options = checked_options(self.parsed, options)
        self.name = name or self.spec
        self._rm: RewardModel | None = None
        self._built_with: tuple[int | None, int] | None = None
        self._taken = False

    @property
    def built(self) -> RewardModel | None:
        """The RM if some run has needed it, else None."""
        return self._rm

    def get(self, batch_size: int | None, seed: int) -> RewardModel:
        """The RM for the next run to score, built now unless one is waiting (built by `get` for this batch size
        and seed and not yet `take`n)."""
        if self._rm is None or self._taken or self._built_with != (batch_size, seed):
            evaluator = checked_options(self.parsed, {"batch_size": batch_size, "seed": seed})
            self._rm = build_rm(self.parsed, CheckedOptions(self.spec, {**evaluator, **self.options}))
            self._built_with, self._taken = (batch_size, seed), False
        return self._rm

    def take(self, batch_size: int | None, seed: int) -> RewardModel:
        """The RM a run scores with, its own: an RM counts its requests, parse failures and truncations, and a
        run's summary reports those counts, so one RM object never serves two runs (the counts would add up)."""
        rm = self.get(batch_size, seed)
        self._taken = True
        return rm


ModelArg = str | RewardModel | ModelHandle


@overload
def evaluate(model: ModelArg, data: str | Sequence[Example] = ..., condition: str | None = ...,
             **kwargs: Any) -> EvalResult: ...


@overload
def evaluate(model: ModelArg, data: str | Sequence[Example], condition: list[str] | tuple[str, ...],
             **kwargs: Any) -> list[EvalResult]: ...


@overload
def evaluate(model: list[ModelArg | EvalRun] | tuple[ModelArg | EvalRun, ...], data: str | Sequence[Example] = ...,
             condition: str | Sequence[str] | None = ..., **kwargs: Any) -> list[EvalResult]: ...


def evaluate(
    model: ModelArg | EvalRun | Sequence[ModelArg | EvalRun],
    data: str | Sequence[Example] = "sample",
    condition: str | Sequence[str] | None = None,
    *,
    settings: EvalSettings | None = None,
    out: str | Path | None = None,
    model_options: dict[str, Any] | None = None,
    cache: Cache | None = None,
    overwrite: bool = False,
    retry_failed: bool = False,
    repair: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    on_run_progress: Callable[[int, int, int], None] | None = None,
    max_usd: float | None = None,
    prices: str | Path | None = None,
    batch: bool = False,
    wait: bool = True,
    seeded_order: bool = False,
    **given: Any,
) -> EvalResult | list[EvalResult]:
    """Evaluate one RM under one condition. With `out`, results go to a resumable run folder.

    `model` is a spec string or a `ModelHandle` (built only if some example still needs scoring, so a finished
    run costs no model load; one RM per run that scores, so its counts are the run's) or a ready RewardModel. `settings`
    (or `given` keywords on top of it, `condition` too) are `EvalSettings`. With `workers` > 1 or a
    `ray_address`, chunks are scored by Ray actors (spec strings only). API engines' spend goes to
    the summary's `cost` (prices: `prices` file over the shipped tables); `max_usd` caps it (`prbench.cost`).
    `batch` sends the API requests as provider batches (`prbench.engines.batch`; `wait=False`: submit and return).
    A list of conditions gives a list of results, one run each, in that order (what `-c none,profile` does); a list
    of models too, model by model (`on_run_progress(run index, done, total)` follows each run of such a list); an
    `EvalRun` in that list is one run with its own condition, settings and keywords (a study's runs).
    `until` (`ci=W` or `decided[=M]`, capped by `until_max` items): every run on a growing random sample until the
    rule holds, the runs raced together (`prbench.evaluation.until`); each summary says why it stopped.
    `seeded_order`: items in one order drawn from the seed (`prbench.evaluation.sequential.seeded_prefix`), so `limit` keeps a
    random sample that a larger limit extends: what `until` grows (the folder records the order).
    """
    kw: dict[str, Any] = {"model_options": model_options, "cache": cache, "overwrite": overwrite,
                          "retry_failed": retry_failed, "repair": repair, "max_usd": max_usd, "prices": prices,
                          "batch": batch, "wait": wait}
    s = EvalSettings.build(settings, **given)
    runs = _runs(model, condition, s.model_copy(update={"until": None, "until_max": None}), kw)
    one = not isinstance(model, (list, tuple)) and (condition is None or isinstance(condition, str))
    if s.until is not None or s.until_max is not None:
        check_until(s, wait)  # a bad rule is refused before the data is read
    if condition is not None and not isinstance(condition, str):
        check_conditions(data, list(condition), s)
    if s.until is not None:
        results = evaluate_until(runs, data, s.until, score=_evaluate_one, paid=[_paid(r) for r in runs],
                                 until_max=s.until_max, out=out, on_progress=_progress(on_progress, on_run_progress))
        return results[0] if one else results
    said = _progress(on_progress, on_run_progress)
    results = [_evaluate_one(r.model, data, r.condition, **{**kw, **r.keywords}, settings=r.settings, out=out,
                             seeded_order=seeded_order, on_progress=_of_run(said, i)) for i, r in enumerate(runs)]
    return results[0] if one else results


def _runs(model: ModelArg | EvalRun | Sequence[ModelArg | EvalRun], condition: str | Sequence[str] | None,
          s: EvalSettings, kw: dict[str, Any]) -> list[EvalRun]:
    """The runs `evaluate` was asked for: each model (a spec string becomes a `ModelHandle`: options checked once,
    the RM built at the first run that needs it) under each condition, or `EvalRun`s as given."""
    conditions = [condition] if condition is None or isinstance(condition, str) else list(condition)
    out = []
    for m in model if isinstance(model, (list, tuple)) else [model]:
        if isinstance(m, EvalRun):
            out.append(m)
            continue
        handle = ModelHandle(m, _plain_options(kw["model_options"])) if isinstance(m, str) else m  # plain values first: they name the run
        out += [EvalRun(handle, c or s.condition, s) for c in conditions]
    return out


def _paid(run: EvalRun) -> bool:
    """Whether a run sends API requests (`until: decided` scores the runs that send none on every item first)."""
    m = run.model
    spec, options = (m.spec, m.options) if isinstance(m, ModelHandle) else (
        str(getattr(m, "spec", "")), run.keywords.get("model_options"))
    return engine_provider(spec, options) is not None


def _progress(on_progress: Callable[[int, int], None] | None, on_run_progress: Callable[[int, int, int], None] | None
              ) -> Callable[[int, int, int], None] | None:
    """One callback (run index, done, total) telling both `on_progress` and `on_run_progress`."""
    if on_progress is None and on_run_progress is None:
        return None

    def said(i: int, done: int, total: int) -> None:
        if on_progress is not None:
            on_progress(done, total)
        if on_run_progress is not None:
            on_run_progress(i, done, total)
    return said


def _of_run(said: Callable[[int, int, int], None] | None, i: int) -> Callable[[int, int], None] | None:
    """Run i's own progress callback (done, total)."""
    return None if said is None else lambda done, total: said(i, done, total)


def _evaluate_one(model: RewardModel | ModelHandle, data: str | Sequence[Example], condition: str | None, *,
                  settings: EvalSettings | None, out: str | Path | None, model_options: dict[str, Any] | None,
                  cache: Cache | None, overwrite: bool, retry_failed: bool, repair: bool,
                  on_progress: Callable[[int, int], None] | None, max_usd: float | None, prices: str | Path | None,
                  batch: bool, wait: bool, seeded_order: bool, **given: Any) -> EvalResult:
    """One run of `evaluate` (one model, one condition)."""
    s = EvalSettings.build(settings, **given, **({} if condition is None else {"condition": condition}))
    if s.top_k is None:  # the model's own view (a trained folder that asks for one), else the benchmark's 10
        s = s.model_copy(update={"top_k": shown_top_k(None, model.spec if isinstance(model, ModelHandle) else model)})
    t0 = time.time()
    options = _plain_options(model.options if isinstance(model, ModelHandle) else model_options)
    spec = model.name if isinstance(model, ModelHandle) else getattr(model, "name", model.spec)
    items = _Items(data, s, seeded_order)  # pass 1: ids only (validates everything)
    cache = cache if cache is not None else (Cache(namespace="scores") if out else NullCache())
    run = _open_run(out, model, spec, data, s, options, overwrite, repair, seeded_order) if out else None
    narrow = run is not None and run.config.get("limit") != s.limit  # fewer items than the folder holds: read them
    if run and retry_failed:
        run.rewrite([r for r in run.records() if r.get("credit") is not None])
    done = run.done_ids() if run else set()
    n_todo = sum(1 for i in items.order if i not in done)
    previous = run.previous_summary() if run else None  # a damaged summary is recomputed
    if run and previous and not n_todo and previous.get("n_total") == len(items.order):
        return EvalResult.of(previous, run.records(), run.path, reused=True)  # finished earlier: nothing to compute
    if run and previous and not n_todo and narrow:
        return _first_items(previous, run, items.order, s)
    if on_progress:
        on_progress(len(items.order) - n_todo, len(items.order))  # data read and valid: the count is known before the model loads
    rm, make_chunks, batches = _score_batches(model, s, options, items, done, n_todo, cache,
                                              keep_retrieval=out is not None)
    with cost.tracking(rm, run.path if run else None, max_usd=max_usd, prices=prices, batch=batch) as ledger, \
            _batches(batch and bool(n_todo), rm, run, wait, retry_failed,
                     lambda: [chunk_records(_built(rm), exs, vs, s.seed, s.both_orders,
                                            cast(Cache, ReadOnly(cache)))  # reads like a Cache, keeps nothing
                              for exs, vs in make_chunks()]):
        fresh = _append_all(batches, run, s.condition, len(done), items.order, on_progress, ledger)
    records = _in_order(run, fresh, items.order, keep_others=narrow)
    summary = _summary(records, rm, spec, items.name, s, started=t0, resumed_from=len(done), ledger=ledger)
    if items.n_all is not None:
        summary["order"] = {"kind": "seeded", "seed": s.seed, "n_items": items.n_all}
    if run and not narrow:  # the folder's summary describes all its items
        validity.settle(run, summary, records, seed=s.seed, n_boot=s.n_boot)  # with the card once a control sits beside it
    return EvalResult.of(summary, records, run.path if run else None)


class _Items:
    """The benchmark's examples, read lazily in order (memory flat in the number of items); `order`: id -> place."""

    def __init__(self, data: str | Sequence[Example], s: EvalSettings, seeded: bool = False,
                 conditions: Sequence[str] | None = None):
        self.data, self.s, self.seeded = data, s, seeded
        self.name = data if isinstance(data, str) else "<in-memory>"
        self.n_all: int | None = None  # items in the whole seeded order
        planner = read_planner_file(s.planner_file) if s.planner_file else None
        needs = conditions or [s.condition]  # oracle without a rubric: refused (conditions.require_fields)
        if seeded:
            from prbench.evaluation.sequential import seeded_prefix

            self.n_all, self.order = seeded_prefix(((ex.id, getattr(ex, "item_id", None) or ex.id)
                                                    for ex in require_fields(self._all(), needs, planner)),
                                                   s.seed, s.limit)
        else:
            self.order = {ex.id: i for i, ex in enumerate(require_fields(self.stream(), needs, planner))}

    def _all(self) -> Iterator[Any]:
        s = self.s
        return (iter_examples(self.data, categories=s.categories, split=s.split, format=s.format)
                if isinstance(self.data, str) else iter(self.data))

    def stream(self) -> Iterator[Example]:
        if self.seeded:  # the seeded prefix, read in benchmark order (records are put in seeded order after)
            return (ex for ex in self._all() if ex.id in self.order)
        return take_items(self._all(), self.s.limit)  # items, not pairs: a multi-response item is never cut


def check_conditions(data: str | Sequence[Example], conditions: Sequence[str], s: EvalSettings) -> None:
    """Refuse, before any run is scored, a condition that needs a field the data lacks (`oracle` without
    a rubric, `planner` without planner output): one pass over the data (`conditions.require_fields`),
    only when such a condition is asked for."""
    if {"oracle", "planner"} & set(conditions):
        _Items(data, s, conditions=conditions)


def _plain_options(model_options: dict[str, Any] | None) -> dict[str, Any]:
    """The model's options: they name the run (its folder, summary and cache identity), so plain values only."""
    options = dict(model_options or {})
    refuse_secrets(options)
    try:
        json.dumps(options)
    except TypeError as exc:
        raise PrbenchError(f"model_options must be plain values (text, numbers, lists, mappings) because they name "
                           f"the run ({exc}); load the model yourself and pass it instead of its spec") from None
    return options


def _open_run(out: str | Path, model: RewardModel | ModelHandle, spec: str, data: str | Sequence[Example], s: EvalSettings,
              options: dict[str, Any], overwrite: bool, repair: bool, seeded: bool = False) -> RunDir:
    """The run folder, its config.json being what decides the results (batch size, workers and Ray do not)."""
    data_name = data if isinstance(data, str) else "<in-memory>"
    config = run_identity(s, exclude={"format", "workers", "ray_address", "gpus_per_worker", "until", "until_max"},
                          model=spec, data=data_name, model_options=options)
    config["categories"] = config["categories"] or None
    if digest := spec_digest(str(getattr(model, "spec", ""))):
        config["model_digest"] = digest  # retrained into the same folder: a named config change, never old numbers
    if s.format:
        config["format"] = s.format
    if seeded:
        config["order"] = "seeded"
    if isinstance(data, str) and (digest := data_digest(data)):
        config["data_digest"] = digest  # other or edited data under the same name: a named change, never old numbers
    identity = {**options, "both_orders": True} if s.both_orders else options  # both orders: another run
    if seeded:  # the seeded order keeps other items under a limit: another folder beside the plain run
        identity = {**identity, "order": "seeded"}
    path = run_path(out, spec, data_name, s.condition, identity)
    if not overwrite:
        config["limit"] = _wider_limit(path, s.limit)  # a larger --limit extends the run, a smaller one reads it
    distributed = s.workers > 1 or s.ray_address is not None
    if isinstance(model, ModelHandle) and not distributed and (overwrite or not (path / "summary.json").is_file()):
        model.get(s.batch_size, s.seed)  # a run to score: a model that cannot be built fails before its folder exists
    return RunDir(path, config, overwrite, repair, scope=("limit",))


def _wider_limit(path: Path, limit: int | None) -> int | None:
    """The --limit a run folder should record: the wider of the stored one and the one asked for (None: all)."""
    stored_file = path / "config.json"
    if not stored_file.is_file():
        return limit
    try:
        stored = json.loads(stored_file.read_text(encoding="utf-8")).get("limit", limit)
    except (OSError, ValueError, AttributeError):
        return limit  # a damaged config: RunDir names it
    if not isinstance(stored, int) or isinstance(stored, bool):
        return None if stored is None else limit
    return None if limit is None else max(stored, limit)


def _first_items(previous: dict[str, Any], run: RunDir, order: dict[str, int], s: EvalSettings) -> EvalResult:
    """A smaller --limit than the finished run holds: its first items' records and metrics, nothing scored."""
    from prbench.train.protocol import user_breakdown

    records = sorted((r for r in run.records() if r["id"] in order), key=lambda r: order[r["id"]])
    m = summarize(records, seed=s.seed, n_boot=s.n_boot)
    summary = {**previous, "limit": s.limit, "accuracy": m["accuracy"], "n": m["n"], "n_total": len(records),
               "metrics": m, "per_user": user_breakdown(records, None, seed=s.seed, n_boot=s.n_boot)}
    if isinstance(previous.get("settings"), dict):  # the settings of what is returned: these first items
        summary["settings"] = {**previous["settings"], "limit": s.limit}
    return EvalResult.of(summary, records, run.path, reused=True)


def _score_batches(model: RewardModel | ModelHandle, s: EvalSettings, options: dict[str, Any], items: _Items, done: set[str],
                   n_todo: int, cache: Cache, keep_retrieval: bool
                   ) -> tuple[RewardModel | None, Callable[[], Iterator[Any]], Iterator[list[dict]]]:
    """(the RM, or None when Ray actors load it; a maker of the (examples, views) chunks still to do; their
    scored records, one list per RM call)."""
    distributed = s.workers > 1 or s.ray_address is not None
    if distributed and not isinstance(model, ModelHandle):
        raise PrbenchError("workers > 1 needs a model spec string (each Ray actor loads its own copy)")
    rm_options = {"batch_size": s.batch_size, "seed": s.seed, **options}
    rm = None if distributed else (model if isinstance(model, RewardModel) else model.take(s.batch_size, s.seed))
    view_args: dict[str, Any] = {"retriever": load_retriever(s.retriever), "top_k": s.top_k, "seed": s.seed,
                 "planner": read_planner_file(s.planner_file) if s.planner_file else None,
                 "max_context_chars": s.max_context_chars,
                 "cache": Cache(namespace="retrieval") if keep_retrieval and not isinstance(cache, NullCache) else None,
                 # wrong-* draw donors from every item of the split, never only the filtered ones, so
                 # --limit and --categories change no record's donor
                 "pool": _donor_pool(items.data, s) if s.condition.startswith("wrong-") and n_todo else ()}

    def make_chunks() -> Iterator[tuple[list[Example], list[Any]]]:
        # appended as scored: the first chunk is one RM batch (an interrupt after the first call keeps it),
        # then four batches per append
        todo = (ex for ex in items.stream() if ex.id not in done)
        sizes = chain([max(s.batch_size, 1)], repeat(max(s.batch_size, 1) * 4))
        parts = takewhile(bool, (list(islice(todo, n)) for n in sizes))
        return ((part, [build_view(ex, s.condition, **view_args) for ex in part]) for part in parts)

    if not distributed:
        return rm, make_chunks, (chunk_records(_built(rm), exs, vs, s.seed, s.both_orders, cache)
                                 for exs, vs in make_chunks())
    from prbench.evaluation.distributed import ray_chunks

    return None, make_chunks, ray_chunks(model.spec, rm_options, make_chunks(), workers=max(s.workers, 1), seed=s.seed,
                            both_orders=s.both_orders, ray_address=s.ray_address, gpus_per_worker=s.gpus_per_worker,
                            use_cache=not isinstance(cache, NullCache))


def _built(rm: RewardModel | None) -> RewardModel:
    """The RM of a run scored in this process (None only where Ray actors score, which never calls this)."""
    if rm is None:
        raise PrbenchError("--batch needs a run folder (--out) and one process (no --workers / Ray)")
    return rm


def _append_all(batches: Iterator[list[dict]], run: RunDir | None, condition: str, n_done: int,
                order: dict[str, int], on_progress: Callable[[int, int], None] | None, ledger: Any) -> list[dict]:
    """Each batch stamped with its condition and appended (fsynced, with the spend so far) as it comes; an
    interrupt keeps what is on disk."""
    fresh: list[dict] = []
    try:
        for recs in batches:
            for r in recs:
                r["condition"] = condition
            if run:
                run.append(recs)
                cost.save(ledger, run.path)
            fresh.extend(recs)
            if on_progress:
                on_progress(n_done + len(fresh), len(order))
    except KeyboardInterrupt as exc:  # SIGINT / SIGTERM: the batch in flight is discarded, the rest is on disk
        where = f" in {run.path}" if run else " (no --out: nothing kept)"
        # counted from the folder: a signal between the fsynced append and `fresh` must not under-count
        saved = sum(r["id"] in order for r in scan_records(run.examples_path)[0]) if run else 0
        interrupt.note(exc, f"{saved} of {len(order)} items saved{where}")
        raise
    return fresh


def _in_order(run: RunDir | None, fresh: list[dict], order: dict[str, int], keep_others: bool = False) -> list[dict]:
    """The run's records in benchmark order; retried items go back to their place: same bytes as one clean run.
    `keep_others`: the folder holds more items than asked for (a smaller --limit): it is left as it is."""
    records = run.records() if run else fresh
    in_order = sorted((r for r in records if r["id"] in order), key=lambda r: order[r["id"]])
    if run and in_order != records and not keep_others:
        run.rewrite(in_order)
    return in_order


def _summary(records: list[dict], rm: RewardModel | None, spec: str, data_name: str, s: EvalSettings, *,
             started: float, resumed_from: int, ledger: Any) -> dict[str, Any]:
    """The run's summary.json: metrics, what was run, on what, with which versions."""
    from prbench.train.protocol import user_breakdown  # per-user distribution; seen vs unseen users

    m = summarize(records, seed=s.seed, n_boot=s.n_boot)
    if why := no_context_failure(s.condition, m.get("n_no_context", 0), len(records)):
        raise PrbenchError(why)
    summary = stamp("eval", {
        "model": rm.name if rm is not None else spec, "spec": spec, "data": data_name, "condition": s.condition,
        "seed": s.seed, "kind": "pairwise" if any("verdicts" in r for r in records) else "pointwise",
        "capabilities": capabilities(rm if rm is not None else spec).as_dict(),
        "accuracy": m["accuracy"], "n": m["n"], "n_total": len(records), "metrics": m,
        "model_info": ({"fingerprint": rm.fingerprint(), **rm.run_info()} if rm is not None
                       else {"fingerprint": {"spec": spec}, "workers": s.workers, "ray_address": s.ray_address}),
        "versions": _versions(), "wall_time_s": round(time.time() - started, 3), "resumed_from": resumed_from,
        "cost": ledger.summary() if ledger is not None else None,
    })
    summary["per_user"] = user_breakdown(records, rm, seed=s.seed, n_boot=s.n_boot)
    # every setting that changes the numbers, in the summary itself (the folder's name carries only the model's
    # options and both orders; readers of older runs take these from config.json)
    summary["settings"] = {k: getattr(s, k) for k in RunSettings.model_fields if hasattr(s, k)}
    return summary
