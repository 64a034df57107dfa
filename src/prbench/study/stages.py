"""The stages a study can run. Each calls the same API as the matching CLI command."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rich.markup import escape

from prbench.evaluate import evaluate
from prbench.runs import slug
from prbench.study.config import ModelEntry
from prbench.study.runner import PlannedRun, StudyContext, stage

# Known hosted datasets, so a dry run needs no network: items and rough tokens per part.
KNOWN_DATA = {
    "QiyaoMa/Personalized-RewardBench": 2830,
    "alireza7/LaMP-QA": 2830,
}
TOKENS = {"question": 40, "post": 60, "response": 130, "aspects": 80}


@lru_cache(maxsize=8)
def _item_count(data: str, limit: int | None) -> int:
    if data in KNOWN_DATA:
        n = KNOWN_DATA[data]
    else:
        from prbench.data import load_examples

        n = len(load_examples(data))
    return min(n, limit) if limit else n


def _input_tokens(condition: str, top_k: int) -> int:
    ctx = {"profile": top_k * TOKENS["post"], "wrong-profile": top_k * TOKENS["post"],
           "planner": TOKENS["aspects"], "oracle": TOKENS["aspects"]}.get(condition, 0)
    return TOKENS["question"] + ctx + TOKENS["response"]


def model_conditions(ctx: StudyContext, entry: ModelEntry) -> list[str]:
    return entry.conditions or ctx.cfg.conditions


def planner_file(ctx: StudyContext) -> str | None:
    if ctx.cfg.planner is None:
        return None
    return str(ctx.path("planner", f"{slug(ctx.cfg.planner.spec)}.jsonl"))


def is_pairwise(entry: ModelEntry) -> bool:
    return entry.spec.startswith("judge:") and entry.options.get("mode", "pairwise") in ("pairwise", "likelihood")


# -- eval -----------------------------------------------------------------------------------
def _plan_eval(ctx: StudyContext) -> list[PlannedRun]:
    n = _item_count(ctx.data, ctx.cfg.limit)
    out = []
    for entry in ctx.cfg.models:
        for cond in model_conditions(ctx, entry):
            per_item = (2 if entry.both_orders else 1) if is_pairwise(entry) else 2
            tokens = n * per_item * (_input_tokens(cond, ctx.cfg.top_k) + (TOKENS["response"] if is_pairwise(entry) else 0))
            calls = 0 if entry.spec.startswith("baseline:") else n * per_item
            out.append(PlannedRun("eval", f"{entry.spec} [{cond}]", calls, 0 if calls == 0 else tokens))
    return out


@stage("eval", _plan_eval)
def run_eval(ctx: StudyContext) -> None:
    bar = ctx.outputs.get("progress")
    results: list[dict[str, Any]] = []
    for entry in ctx.cfg.models:
        for cond in model_conditions(ctx, entry):
            task = bar.add_task(escape(f"  eval {entry.spec} [{cond}]"), total=None) if bar else None
            res = evaluate(
                entry.spec, ctx.data, cond, out=ctx.runs, seed=ctx.cfg.seed, limit=ctx.cfg.limit,
                categories=ctx.cfg.categories, top_k=ctx.cfg.top_k, retriever=ctx.cfg.retriever,
                planner_file=planner_file(ctx) if cond == "planner" else None, both_orders=entry.both_orders,
                batch_size=ctx.cfg.batch_size, model_options=entry.options,
                on_progress=(lambda d, t, task=task: bar.update(task, completed=d, total=t)) if bar else None,
            )
            if bar:
                bar.remove_task(task)
            results.append({"spec": entry.spec, "condition": cond, "path": str(res.path),
                            "accuracy": res.summary["accuracy"]})
    ctx.outputs["eval"] = results
