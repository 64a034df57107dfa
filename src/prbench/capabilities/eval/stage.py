"""The study's eval stage: every model of the study under each of its conditions (and on the other benchmarks), by
`prbench.evaluate` as `prbench eval` runs it, and its dry-run plan (calls and tokens per run)."""

from __future__ import annotations

from rich.markup import escape

from prbench import evaluate
from prbench.capabilities.eval.settings import EvalSettings
from prbench.evaluation.evaluate import ModelHandle
from prbench.evaluation.until import EvalRun
from prbench.rewards.base import capabilities
from prbench.study.config import ModelEntry, PlannerStage
from prbench.study.context import EvalOutput, PlannedRun, StudyContext, stage
from prbench.study.stages import TOKENS, input_tokens, item_count, model_conditions, planner_file


def eval_limit(ctx: StudyContext, entry: ModelEntry, condition: str) -> int | None:
    """The model's limit; under `planner`, never more items than the planner planned."""
    p = ctx.cfg.section("planner", PlannerStage)
    limits = [x for x in (entry.limit or ctx.cfg.limit, p.limit if condition == "planner" and p else None) if x]
    return min(limits) if limits else None


def _judge_tokens(entry: ModelEntry, condition: str, top_k: int) -> tuple[int, int]:
    """(tokens of one call, of its start shared by the calls about one item) for a built-in judge template:
    the template's own words, the question and the condition's context come first, the responses last."""
    from prbench.rewards.judges import template_tokens

    mode = str(entry.options.get("mode", "pairwise"))
    head, rest = template_tokens(mode, condition != "none") if not entry.options.get("prompt_file") else (0, 0)
    start = head + input_tokens(condition, top_k) - TOKENS["response"]
    return start + rest + TOKENS["response"] * (2 if entry.pairwise else 1), start


def _plan_eval(ctx: StudyContext) -> list[PlannedRun]:
    out = []
    for entry in ctx.cfg.models:
        for cond in model_conditions(ctx, entry):
            n = item_count(ctx.data, eval_limit(ctx, entry, cond), ctx.cfg.format)
            per_item = (2 if entry.both_orders else 1) if entry.pairwise else 2
            per_call, start = (_judge_tokens(entry, cond, ctx.cfg.top_k) if entry.spec.startswith("judge") else
                               (input_tokens(cond, ctx.cfg.top_k) + (TOKENS["response"] if entry.pairwise else 0), 0))
            calls = n * per_item if capabilities(entry.spec).calls_model else 0
            out.append(PlannedRun("eval", f"{entry.spec} [{cond}]", calls, 0 if calls == 0 else n * per_item * per_call,
                                  entry.spec, prefix_tokens=start, calls_per_prefix=per_item, condition=cond))
    for bench in ctx.cfg.benchmarks:  # pairs of other benchmarks (multi-response items count each pair)
        from prbench.data import iter_examples

        n = sum(1 for _ in iter_examples(ctx.resolve_data(bench.data), format=bench.format))
        n = min(n, bench.limit) if bench.limit else n
        for entry in ctx.cfg.models:
            for cond in bench.conditions:
                per_item = (2 if entry.both_orders else 1) if entry.pairwise else 2
                calls = n * per_item if capabilities(entry.spec).calls_model else 0
                tokens = n * per_item * (input_tokens(cond, ctx.cfg.top_k) + TOKENS["response"])
                out.append(PlannedRun("eval", f"{entry.spec} [{cond}] on {bench.data}", calls, tokens if calls else 0,
                                      entry.spec))
    return out


@stage("eval", _plan_eval, order=20)
def run_eval(ctx: StudyContext) -> None:
    bar = ctx.progress
    handles = {id(entry): ModelHandle(entry.spec, entry.options) for entry in ctx.cfg.models}  # options checked once; an RM per run that scores
    results: list[EvalOutput] = _eval_until(ctx, handles) if ctx.cfg.until else []
    for entry in ctx.cfg.models if not ctx.cfg.until else ():
        for cond in model_conditions(ctx, entry):
            task = bar.add_task(escape(f"  eval {entry.spec} [{cond}]"), total=None) if bar else None
            res = evaluate(
                handles[id(entry)], ctx.data, cond, out=ctx.runs, seed=ctx.cfg.seed, limit=eval_limit(ctx, entry, cond),
                categories=ctx.cfg.categories, top_k=ctx.cfg.top_k, retriever=ctx.cfg.retriever,
                planner_file=planner_file(ctx) if cond == "planner" else None, both_orders=entry.both_orders,
                batch_size=ctx.cfg.batch_size, format=ctx.cfg.format,
                batch=entry.batch, max_usd=entry.max_usd,
                on_progress=(lambda d, t, task=task: bar.update(task, completed=d, total=t)) if bar else None,
            )
            if bar:
                bar.remove_task(task)
            results.append(EvalOutput(spec=entry.spec, condition=cond, path=str(res.path),
                                      accuracy=res.summary.accuracy))
    for bench in ctx.cfg.benchmarks:  # the same models on other benchmarks: the cross-benchmark meta table
        for entry in ctx.cfg.models:
            for cond in bench.conditions:
                res = evaluate(handles[id(entry)], ctx.resolve_data(bench.data), cond, out=ctx.runs,
                               seed=ctx.cfg.seed, limit=bench.limit, top_k=ctx.cfg.top_k, retriever=ctx.cfg.retriever,
                               both_orders=entry.both_orders, batch_size=ctx.cfg.batch_size,
                               format=bench.format, batch=entry.batch,
                               max_usd=entry.max_usd)
                results.append(EvalOutput(spec=entry.spec, condition=cond, path=str(res.path), data=bench.data,
                                          accuracy=res.summary.accuracy))
    ctx.outputs.eval = results


def _eval_until(ctx: StudyContext, handles: dict[int, ModelHandle]) -> list[EvalOutput]:
    """The study's main runs under `until` (`prbench.evaluation.until`): one growing seeded prefix; under `decided` a
    model stops once its every comparison is settled, and models without API calls are scored in full first;
    `until_max` (else `limit`) caps the items, and each run's own limit caps its prefix."""
    jobs = [(entry, cond) for entry in ctx.cfg.models for cond in model_conditions(ctx, entry)]
    runs = [EvalRun(handles[id(entry)], cond, EvalSettings.build(
        seed=ctx.cfg.seed, limit=eval_limit(ctx, entry, cond), categories=ctx.cfg.categories, top_k=ctx.cfg.top_k,
        retriever=ctx.cfg.retriever, planner_file=planner_file(ctx) if cond == "planner" else None,
        both_orders=entry.both_orders, batch_size=ctx.cfg.batch_size, format=ctx.cfg.format),
        {"batch": entry.batch, "max_usd": entry.max_usd}) for entry, cond in jobs]
    results = evaluate(runs, ctx.data, out=ctx.runs, until=str(ctx.cfg.until),
                       until_max=ctx.cfg.until_max or ctx.cfg.limit)
    return [EvalOutput(spec=e.spec, condition=c, path=str(r.path), accuracy=r.summary.accuracy,
                       sequential=r.summary.sequential and r.summary.sequential.model_dump(mode="json")) for (e, c), r in zip(jobs, results, strict=True)]
