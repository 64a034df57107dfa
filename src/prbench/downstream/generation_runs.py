"""Generation runs shared by RGD and ICL: policy views and prompts, the samples-folder record, gold
and rubric assessment, and the summary / downstream.json writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench.context.conditions import View, build_view, read_planner_file
from prbench.context.retrieval import load_retriever
from prbench.errors import PrbenchError
from prbench.schema import SourceItem
from prbench.stats import metrics
from prbench.store.cache import Cache, NullCache, text_hash
from prbench.store.records import GenerationSummary, stamp, typed_summary
from prbench.store.runs import read_json, write_json_atomic

POLICY_CONDITIONS = ("profile", "none", "wrong-profile")


@dataclass
class GenerationRun:
    """Outputs of `run_rgd` / `run_icl`: the summary, the texts by item id, the folder."""

    summary: GenerationSummary
    """summary.json as the model its readers validate (`prbench.store.records.GenerationSummary`)."""
    texts: dict[str, str]
    path: Path | None
    records: list[dict[str, Any]] = field(default_factory=list)
    written: dict[str, Any] = field(default_factory=dict, repr=False)
    """The summary's object as written (key order and number types kept): what `--json` prints."""

    @classmethod
    def of(cls, summary: dict[str, Any], texts: dict[str, str], path: Path | None,
           records: list[dict[str, Any]]) -> GenerationRun:
        """The result of a run from the summary it wrote, validated as the readers do."""
        typed = typed_summary(summary, (path or Path(".")) / "summary.json", GenerationSummary)
        return cls(typed, texts, path, records, summary)


def policy_view(item: SourceItem, condition: str, *, retriever: Any, top_k: int, pool: Sequence[SourceItem],
                seed: int, cache: Cache | None) -> View:
    """What the policy sees (never the rubric: the policy is the user-blind part of RGD)."""
    if condition not in POLICY_CONDITIONS:
        raise PrbenchError(f"the policy must not see the rubric: policy condition must be one of "
                           f"{', '.join(POLICY_CONDITIONS)}, got {condition!r}")
    return build_view(item, condition, retriever=retriever, top_k=top_k, pool=pool, seed=seed, cache=cache)


def encode_prompt(engine: Any, messages: list[dict[str, str]], reserve: int) -> tuple[list[int], bool]:
    """Prompt ids as `engine.generate` builds them (left-truncated to leave `reserve` tokens)."""
    ids = engine.encode_chat(messages, True)
    max_length = getattr(engine, "max_length", None)
    if max_length is not None and len(ids) + reserve > max_length:
        keep = max(1, max_length - reserve)
        if len(ids) > keep:
            return ids[-keep:], True
    return ids, False


def gold_or_grade(
    items: Sequence[SourceItem],
    texts: dict[str, str],
    *,
    grader: Any = None,
    encoder: str | None = "builtin:minilm-l6",
    seed: int = 0,
    n_boot: int = 1000,
) -> dict[str, Any]:
    """Gold-answer metrics (when items carry gold answers) and rubric grades (when a grader is given).

    Returns {"gold": GoldResult | None, "grades": {id: score or None}, "grade_summary": ..., "grader": ...}.
    Items without an output are left out of both (counted by the caller).
    """
    from prbench.downstream.gold import score_gold

    done = [it for it in items if it.id in texts]
    out: dict[str, Any] = {"gold": None, "grades": {}, "grade_summary": None, "grader": None}
    if any(it.gold_answer for it in done):
        out["gold"] = score_gold(done, texts, encoder=encoder, seed=seed, n_boot=n_boot)
    if grader is not None:
        gradable = [it for it in done if it.rubric_aspects]
        grades = grader.grade([(it, texts[it.id]) for it in gradable])
        vals = {it.id: (g.score if g.valid else None) for it, g in zip(gradable, grades)}
        out["grades"] = vals
        good = np.array([v for v in vals.values() if v is not None], dtype=float)
        lo, hi = metrics.bootstrap_ci(good, seed=seed, n_boot=n_boot) if good.size else (None, None)
        out["grade_summary"] = {"mean": float(good.mean()) if good.size else None, "ci_low": lo, "ci_high": hi,
                                "n": int(good.size), "n_invalid": int(sum(v is None for v in vals.values())),
                                "n_without_rubric": len(done) - len(gradable), "scale": "mean aspect grade, 0-2"}
        out["grader"] = grader.run_info()
    return out


DOWNSTREAM_METRICS = ("auto", "grade", "rouge1", "rougeL", "embedding", "none")


def downstream_values(assessed: dict[str, Any], metric: str) -> tuple[str, dict[str, float], str, str] | None:
    """(metric, per-item values, grader label, scale) for downstream.json, or None when nothing fits.

    "auto": the rubric grade when a grader ran, else ROUGE-1 against gold answers when present.
    """
    if metric not in DOWNSTREAM_METRICS:
        raise PrbenchError(f"unknown downstream metric {metric!r} (use {', '.join(DOWNSTREAM_METRICS)})")
    if metric == "none":
        return None
    if metric == "auto":
        metric = "grade" if assessed.get("grader") else ("rouge1" if assessed.get("gold") else "none")
        if metric == "none":
            return None
    if metric == "grade":
        if not assessed.get("grader"):
            raise PrbenchError("downstream metric 'grade' needs --grader")
        vals = {i: v for i, v in assessed["grades"].items() if v is not None}
        return "grade", vals, assessed["grader"]["grader"], "mean aspect grade, 0-2"
    gold = assessed.get("gold")
    if gold is None:
        raise PrbenchError(f"downstream metric {metric!r} needs items with gold answers")
    vals = {i: row[metric] for i, row in gold.per_item.items() if row.get(metric) is not None}
    from prbench.downstream.gold import METRIC_SCALES

    return metric, vals, f"gold:{metric}", METRIC_SCALES[metric]


def write_downstream_file(path: Path, rm_name: str, setting: str, values: dict[str, float], grader: str, scale: str,
                          seed: int, n_boot: int, extra: dict[str, Any]) -> Path | None:
    """One value per item (k = [1]) in the meta-evaluation's format; None when no item has a value."""
    from prbench.downstream.results import DownstreamResult, write_downstream

    if not values:
        return None
    arr = np.array(list(values.values()), dtype=float)
    lo, hi = metrics.bootstrap_ci(arr, seed=seed, n_boot=n_boot)
    res = DownstreamResult(rm=rm_name, setting=setting, k=[1], first_k=[float(arr.mean())],
                           expected=[float(arr.mean())], ci_low=[lo], ci_high=[hi],
                           per_item={i: {"1": float(v)} for i, v in values.items()}, grader=grader,
                           n_items=len(values), scale=scale, extra=extra)
    return write_downstream(path, res)


def generation_record(item: SourceItem, prompt_text: str, text: str, finish: str, n_tokens: int, seed: int,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `samples.jsonl` line with one sample (the Best-of-N samples layout, n = 1)."""
    rec: dict[str, Any] = {"id": item.id, "category": item.category, "prompt_hash": text_hash(prompt_text),
                           "samples": [{"i": 0, "text": text.strip(), "finish_reason": finish,
                                        "n_tokens": n_tokens, "seed": seed}]}
    if extra:
        rec.update(extra)
    return rec


def open_generation_run(path: Path | None, cfg: dict[str, Any], overwrite: bool, items: Sequence[SourceItem]) -> Any:
    """The resumable folder of one generation run (None without `out`), holding the items it answers."""
    if path is None:
        return None
    from prbench.data import write_examples
    from prbench.downstream.sampling import ITEMS_FILE, SamplesDir

    run = SamplesDir(path, cfg, overwrite)
    if not (run.path / ITEMS_FILE).exists():
        write_examples(items, run.path / ITEMS_FILE)
    return run


def context_sources(retriever: str, planner_file: str | None, persist: bool) -> tuple[Any, Cache | None, Any]:
    """(retriever, its cache when results persist, planner outputs) for building policy and RM views."""
    return (load_retriever(retriever), Cache(namespace="retrieval") if persist else None,
            read_planner_file(planner_file) if planner_file else None)


class GenerationWriter:
    """Appends each batch's records to the run folder (durably) and reports progress; `finish`
    returns the records in item order with their texts. Shared by RGD and ICL."""

    def __init__(self, run: Any, items: Sequence[SourceItem], n_done: int,
                 on_progress: Callable[[int, int], None] | None = None):
        self.run, self.items, self.n_done, self.on_progress = run, items, n_done, on_progress
        self.fresh: list[dict[str, Any]] = []

    def add(self, records: list[dict[str, Any]], n_attempted: int) -> None:
        """Store one batch; `n_attempted` counts its items, written or failed."""
        if self.run:
            self.run.append(records)
        self.fresh.extend(records)
        self.n_done += n_attempted
        if self.on_progress:
            self.on_progress(self.n_done, len(self.items))

    def finish(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        records = ordered_records(self.run, self.fresh, self.items)
        return records, {r["id"]: r["samples"][0]["text"] for r in records}


def ordered_records(run: Any, fresh: list[dict[str, Any]], items: Sequence[SourceItem]) -> list[dict[str, Any]]:
    order = {it.id: i for i, it in enumerate(items)}
    records = run.records() if run else fresh
    return sorted((r for r in records if r["id"] in order), key=lambda r: order[r["id"]])


def finish_generation_run(run: Any, records: list[dict[str, Any]], items: Sequence[SourceItem], texts: dict[str, str], *,
            grader: Any, encoder: str | None, seed: int, n_boot: int, downstream_metric: str, rm_name: str | None,
            setting: str, extra_summary: dict[str, Any], downstream_extra: dict[str, Any], t0: float) -> dict[str, Any]:
    """Assess outputs (gold, rubric), write scores.jsonl, downstream.json and summary.json."""
    from prbench.downstream.grader import Grader, load_grader

    grader_obj = None
    if grader is not None:
        grader_obj = grader if isinstance(grader, Grader) else load_grader(
            grader, cache=Cache(namespace="grades") if run else NullCache())
    done_items = [it for it in items if it.id in texts]
    assessed = gold_or_grade(done_items, texts, grader=grader_obj, encoder=encoder, seed=seed, n_boot=n_boot)
    gold = assessed["gold"]
    rows = []
    for it in done_items:
        row: dict[str, Any] = {"id": it.id}
        if gold is not None:
            row["gold"] = gold.per_item.get(it.id)
        if grader_obj is not None:
            row["grade"] = assessed["grades"].get(it.id)
        rows.append(row)
    summary: dict[str, Any] = stamp(setting, {
        **extra_summary,
        "n_items": len(items), "n_generated": len(texts), "n_missing": len(items) - len(texts),
        "mean_words": (float(np.mean([len(t.split()) for t in texts.values()])) if texts else None),
        "gold": gold.summary() if gold is not None else None,
        "grade": assessed["grade_summary"], "grader": assessed["grader"],
        "seed": seed, "n_boot": n_boot,
    })
    dpath = None
    picked = downstream_values(assessed, downstream_metric) if rm_name else None
    if run is not None:
        write_json_atomic(run.path / "scores.json", {"rows": rows})
        if picked is not None and rm_name:  # picked only with an RM name
            metric, values, label, scale = picked
            dpath = write_downstream_file(run.path, rm_name, setting, values, label, scale, seed, n_boot,
                                          {**downstream_extra, "metric": metric, "samples": str(run.path),
                                           "n_excluded": {"no_value": len(done_items) - len(values),
                                                          "not_generated": len(items) - len(texts)}})
    summary["downstream"] = str(dpath) if dpath else None
    summary["downstream_metric"] = picked[0] if picked else None
    summary["wall_time_s"] = round(time.time() - t0, 3)
    if run is not None:
        run.write_summary(summary)
    return summary


def read_generations(path: str | Path) -> dict[str, str]:
    """{item id: text} from an RGD or ICL folder (the samples layout, first sample)."""
    from prbench.downstream.sampling import read_samples

    ss = read_samples(path)
    return {i: s[0] for i, s in ss.samples.items()}


def read_summary(path: str | Path) -> dict[str, Any]:
    return read_json(Path(path) / "summary.json")
