"""The stages a study can run. Each calls the same API as the matching CLI command."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from rich.markup import escape

from prbench import config, evaluate
from prbench.errors import PrbenchError
from prbench.evaluation.evaluate import ModelHandle
from prbench.rewards.base import capabilities
from prbench.store.runs import slug
from prbench.study.config import ModelEntry, PlannerStage
from prbench.study.context import PlannedRun, StudyContext, stage

# Known hosted datasets, so a dry run needs no network: items and rough tokens per part.
KNOWN_DATA = {
    "QiyaoMa/Personalized-RewardBench": 2830,
    "alireza7/LaMP-QA": 2830,
}
TOKENS = {"question": 40, "post": 60, "response": 130, "aspects": 80}


@lru_cache(maxsize=8)
def _item_count(data: str, limit: int | None, fmt: str | None = None) -> int:
    if data in KNOWN_DATA:
        n = KNOWN_DATA[data]
    else:
        from prbench.data import load_examples

        n = len(load_examples(data, format=fmt))
    return min(n, limit) if limit else n


def _input_tokens(condition: str, top_k: int) -> int:
    ctx = {"profile": top_k * TOKENS["post"], "wrong-profile": top_k * TOKENS["post"],
           "planner": TOKENS["aspects"], "oracle": TOKENS["aspects"]}.get(condition, 0)
    return TOKENS["question"] + ctx + TOKENS["response"]


def model_conditions(ctx: StudyContext, entry: ModelEntry) -> list[str]:
    return entry.conditions or ctx.cfg.conditions


S = TypeVar("S")


def needs(section: S | None, name: str) -> S:
    """A stage's section of the study file (StudyConfig refuses a stage without it; this says so too)."""
    if section is None:
        raise PrbenchError(f"this study has no {name!r} section, which its stages need")
    return section


def _planner_path(ctx: StudyContext, planner: PlannerStage) -> str:
    return str(ctx.path("planner", f"{slug(planner.spec)}.jsonl"))


def planner_file(ctx: StudyContext) -> str | None:
    if ctx.cfg.planner is None:
        return None
    return _planner_path(ctx, ctx.cfg.planner)


# -- eval -----------------------------------------------------------------------------------
def eval_limit(ctx: StudyContext, entry: ModelEntry, condition: str) -> int | None:
    """The model's limit; under `planner`, never more items than the planner planned."""
    limits = [x for x in (entry.limit or ctx.cfg.limit,
                          ctx.cfg.planner.limit if condition == "planner" and ctx.cfg.planner else None) if x]
    return min(limits) if limits else None


def _judge_tokens(entry: ModelEntry, condition: str, top_k: int) -> tuple[int, int]:
    """(tokens of one call, of its start shared by the calls about one item) for a built-in judge template:
    the template's own words, the question and the condition's context come first, the responses last."""
    from prbench.rewards.judges import template_tokens

    mode = str(entry.options.get("mode", "pairwise"))
    head, rest = template_tokens(mode, condition != "none") if not entry.options.get("prompt_file") else (0, 0)
    start = head + _input_tokens(condition, top_k) - TOKENS["response"]
    return start + rest + TOKENS["response"] * (2 if entry.pairwise else 1), start


def _plan_eval(ctx: StudyContext) -> list[PlannedRun]:
    out = []
    for entry in ctx.cfg.models:
        for cond in model_conditions(ctx, entry):
            n = _item_count(ctx.data, eval_limit(ctx, entry, cond), ctx.cfg.format)
            per_item = (2 if entry.both_orders else 1) if entry.pairwise else 2
            per_call, start = (_judge_tokens(entry, cond, ctx.cfg.top_k) if entry.spec.startswith("judge") else
                               (_input_tokens(cond, ctx.cfg.top_k) + (TOKENS["response"] if entry.pairwise else 0), 0))
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
                tokens = n * per_item * (_input_tokens(cond, ctx.cfg.top_k) + TOKENS["response"])
                out.append(PlannedRun("eval", f"{entry.spec} [{cond}] on {bench.data}", calls, tokens if calls else 0,
                                      entry.spec))
    return out


@stage("eval", _plan_eval, order=20)
def run_eval(ctx: StudyContext) -> None:
    bar = ctx.outputs.get("progress")
    handles = {id(entry): ModelHandle(entry.spec, entry.options) for entry in ctx.cfg.models}  # options checked once; an RM per run that scores
    results: list[dict[str, Any]] = _eval_until(ctx, handles) if ctx.cfg.until else []
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
            results.append({"spec": entry.spec, "condition": cond, "path": str(res.path),
                            "accuracy": res.summary.accuracy})
    for bench in ctx.cfg.benchmarks:  # the same models on other benchmarks: the cross-benchmark meta table
        for entry in ctx.cfg.models:
            for cond in bench.conditions:
                res = evaluate(handles[id(entry)], ctx.resolve_data(bench.data), cond, out=ctx.runs,
                               seed=ctx.cfg.seed, limit=bench.limit, top_k=ctx.cfg.top_k, retriever=ctx.cfg.retriever,
                               both_orders=entry.both_orders, batch_size=ctx.cfg.batch_size,
                               format=bench.format, batch=entry.batch,
                               max_usd=entry.max_usd)
                results.append({"spec": entry.spec, "condition": cond, "path": str(res.path), "data": bench.data,
                                "accuracy": res.summary.accuracy})
    ctx.outputs["eval"] = results


def _eval_until(ctx: StudyContext, handles: dict[int, ModelHandle]) -> list[dict[str, Any]]:
    """The study's main runs under `until` (`prbench.stats.sequential`): one growing seeded prefix; under `decided` a
    model stops once its every comparison is settled, and models without API calls are scored in full first;
    `until_max` (else `limit`) caps the items."""
    from prbench.engines.providers import engine_provider
    from prbench.stats.sequential import count_items, until_runs

    jobs = [(entry, cond) for entry in ctx.cfg.models for cond in model_conditions(ctx, entry)]

    def at(i: int, n: int, said: Any) -> Any:
        entry, cond = jobs[i]
        cap = eval_limit(ctx, entry, cond)
        return evaluate(handles[id(entry)], ctx.data, cond, out=ctx.runs, seed=ctx.cfg.seed, limit=min(n, cap or n),
                        seeded_order=True, categories=ctx.cfg.categories, top_k=ctx.cfg.top_k,
                        retriever=ctx.cfg.retriever, planner_file=planner_file(ctx) if cond == "planner" else None,
                        both_orders=entry.both_orders, batch_size=ctx.cfg.batch_size,
                        format=ctx.cfg.format, batch=entry.batch, max_usd=entry.max_usd, on_progress=said)

    paid = [engine_provider(e.spec, e.options) is not None for e, _ in jobs]
    n_items = count_items(ctx.data, categories=ctx.cfg.categories, format=ctx.cfg.format)
    outcome, summaries = until_runs([(e.spec, c) for e, c in jobs], at, str(ctx.cfg.until), paid=paid,
                                    until_max=ctx.cfg.until_max or ctx.cfg.limit, n_items=n_items)
    return [{"spec": e.spec, "condition": c, "path": str(r.path), "accuracy": s["accuracy"],
             "sequential": s["sequential"]} for (e, c), r, s in zip(jobs, outcome.results, summaries, strict=True)]


def _eval_specs(ctx: StudyContext) -> list[str]:
    """Pointwise models of the study: the default RMs for downstream stages."""
    return [e.spec for e in ctx.cfg.models if not e.pairwise]


def _options_of(ctx: StudyContext, spec: str) -> dict[str, Any]:
    return next((e.options for e in ctx.cfg.models if e.spec == spec), {})


def _downstream_dir(ctx: StudyContext, *parts: str) -> str:
    return str(ctx.runs.joinpath("downstream", *parts))


# -- plan -----------------------------------------------------------------------------------
def _plan_plan(ctx: StudyContext) -> list[PlannedRun]:
    p = needs(ctx.cfg.planner, "planner")
    n = _item_count(ctx.data, p.limit or ctx.cfg.limit)
    return [PlannedRun("plan", f"planner {p.spec}", n, n * (_input_tokens("profile", ctx.cfg.top_k) + 120), p.spec)]


def _track(ctx: StudyContext, label: str) -> Callable[[int, int], None] | None:
    """A progress callback for one step of a stage (items done / total), or None without a display."""
    bar = ctx.outputs.get("progress")
    if not bar:
        return None
    task = bar.add_task(escape(f"  {label}"), total=None)
    return lambda done, total: bar.update(task, completed=done, total=total)


@stage("plan", _plan_plan, order=10)
def run_plan(ctx: StudyContext) -> None:
    from prbench.context.planner import plan

    p = needs(ctx.cfg.planner, "planner")
    path = Path(_planner_path(ctx, p))
    if path.exists():
        done = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        if done >= _item_count(ctx.data, p.limit or ctx.cfg.limit):
            ctx.outputs["plan"] = {"path": str(path), "written": 0, "skipped": done}
            return  # everything planned: no model load
    res = plan(p.spec, ctx.data, str(path), settings=study_defaults(ctx, p, config.PlanSettings),
               planner_options=p.options, on_progress=_track(ctx, f"plan {p.spec}"))
    ctx.outputs["plan"] = {"path": str(res.path), "written": res.written, "failures": res.failures}


# -- sample and Best-of-N -------------------------------------------------------------------
def _samples_dir(ctx: StudyContext) -> str:
    s = needs(ctx.cfg.sample, "sample")
    return _downstream_dir(ctx, "samples", slug(f"{s.policy}-n{s.n}"))


def _plan_sample(ctx: StudyContext) -> list[PlannedRun]:
    section = needs(ctx.cfg.sample, "sample")
    s = study_defaults(ctx, section, config.SampleSettings)
    n = _item_count(ctx.data, s.limit)
    return [PlannedRun("sample", f"{section.policy} x {s.n}", n * s.n,
                       n * s.n * (_input_tokens(s.condition, s.top_k) + s.max_new_tokens))]


@stage("sample", _plan_sample, order=30)
def run_sample(ctx: StudyContext) -> None:
    from prbench.downstream.sampling import sample_policy

    section = needs(ctx.cfg.sample, "sample")
    settings = study_defaults(ctx, section, config.SampleSettings)
    ss = sample_policy(section.policy, ctx.data, _samples_dir(ctx), settings=settings, engine_options=section.options,
                       on_progress=_track(ctx, f"sample {section.policy} x {settings.n}"))
    ctx.outputs["sample"] = {"path": _samples_dir(ctx), "items": len(ss.items), "n": ss.n}


def _plan_bon(ctx: StudyContext) -> list[PlannedRun]:
    s, b = needs(ctx.cfg.sample, "sample"), needs(ctx.cfg.bon, "bon")
    n = _item_count(ctx.data, s.limit or ctx.cfg.limit)
    rms = b.rms or _eval_specs(ctx)
    costly = {spec: capabilities(spec).calls_model for spec in rms}
    runs = [PlannedRun("bon", f"score {spec} [{b.condition}]", n * s.n if costly[spec] else 0,
                       n * s.n * _input_tokens(b.condition, ctx.cfg.top_k) if costly[spec] else 0)
            for spec in rms]
    runs.append(PlannedRun("bon", f"grade with {b.grader} (distinct samples, at most)", n * s.n,
                           n * s.n * (TOKENS["response"] + TOKENS["aspects"] + 200)))
    return runs


@stage("bon", _plan_bon, order=40)
def run_bon(ctx: StudyContext) -> None:
    from prbench.downstream.bon import best_of_n

    b = needs(ctx.cfg.bon, "bon")
    planner = {"planner_file": planner_file(ctx)} if b.condition == "planner" else {}
    settings = study_defaults(ctx, b, config.BonSettings, batch_size=ctx.cfg.batch_size, **planner)
    res = best_of_n(_samples_dir(ctx), b.rms or _eval_specs(ctx), b.grader, settings=settings,
                    out=_downstream_dir(ctx, "bon"))
    ctx.outputs["bon"] = {"path": str(res.path), "rms": list(res.results)}


# -- RL -------------------------------------------------------------------------------------
def _plan_rl(ctx: StudyContext) -> list[PlannedRun]:
    section = needs(ctx.cfg.rl, "rl")
    r = study_defaults(ctx, section, config.RLSettings)
    answers = r.steps * r.prompts_per_step * r.num_generations
    return [PlannedRun("rl", f"GRPO {section.policy} with {spec} ({r.steps} steps)", answers,
                       answers * (_input_tokens(r.condition, r.top_k) + r.max_completion_length))
            for spec in section.rms]


@stage("rl", _plan_rl, order=50)
def run_rl(ctx: StudyContext) -> None:
    from prbench.downstream.rl import train_rl

    section = needs(ctx.cfg.rl, "rl")
    settings = study_defaults(ctx, section, config.RLSettings)
    ctx.outputs["rl"] = [str(train_rl(section.policy, spec, ctx.data, _downstream_dir(ctx, "rl", slug(spec)),
                                      settings=settings, grader=section.grader,
                                      rm_options=_options_of(ctx, spec)).path) for spec in section.rms]


# -- reward-guided decoding and policy accuracy ---------------------------------------------
def _plan_rgd(ctx: StudyContext) -> list[PlannedRun]:
    g = needs(ctx.cfg.rgd, "rgd")
    n = _item_count(ctx.data, g.limit or ctx.cfg.limit)
    return [PlannedRun("rgd", f"{g.policy} guided by {spec} (w={g.w}, k={g.k})", n * g.max_new_tokens * g.k // g.chunk,
                       n * g.max_new_tokens * g.k * 100 // g.chunk) for spec in g.rms]


def study_defaults(ctx: StudyContext, section: Any, settings_cls: type[config.Settings], **more_shared: Any) -> Any:
    """A stage section's driver settings, with the study's shared values where the section sets none."""
    shared = {"seed": ctx.cfg.seed, "limit": ctx.cfg.limit, "categories": ctx.cfg.categories,
              "top_k": ctx.cfg.top_k, "retriever": ctx.cfg.retriever, **more_shared}
    own = section.model_dump(include=set(settings_cls.model_fields))
    inherit = {k: v for k, v in shared.items()
               if k in settings_cls.model_fields and k not in section.model_fields_set and v is not None}
    return settings_cls.build(**{**own, **inherit})


def _guided_runs(ctx: StudyContext, name: str, folder: str, settings_cls: type[config.Settings], driver: Any,
                 **extra: Any) -> None:
    """Run a guided-policy driver (RGD, policy accuracy) once per RM of its study section."""
    section = getattr(ctx.cfg, name)
    settings = study_defaults(ctx, section, settings_cls)
    ctx.outputs[name] = [str(getattr(driver(section.policy, spec, ctx.data, _downstream_dir(ctx, folder),
                                            settings=settings, rm_options=_options_of(ctx, spec), **extra),
                                     "path", "")) for spec in section.rms]


@stage("rgd", _plan_rgd, order=60)
def run_rgd_stage(ctx: StudyContext) -> None:
    from prbench.downstream.rgd import run_rgd

    _guided_runs(ctx, "rgd", "rgd", config.RGDSettings, run_rgd, grader=needs(ctx.cfg.rgd, "rgd").grader)


def _plan_pa(ctx: StudyContext) -> list[PlannedRun]:
    a = needs(ctx.cfg.policy_accuracy, "policy_accuracy")
    n = _item_count(ctx.data, a.limit or ctx.cfg.limit)
    return [PlannedRun("policy_accuracy", f"{a.policy} guided by {spec} (w={a.w}, k={a.k})", 2 * n * 100 * a.k,
                       2 * n * 100 * a.k * 120) for spec in a.rms]


@stage("policy_accuracy", _plan_pa, order=70)
def run_policy_accuracy(ctx: StudyContext) -> None:
    from prbench.downstream.policy_accuracy import policy_accuracy

    _guided_runs(ctx, "policy_accuracy", "policy-accuracy", config.PolicyAccuracySettings, policy_accuracy)


# -- meta and report ------------------------------------------------------------------------
def _no_calls(name: str) -> Any:
    return lambda ctx: [PlannedRun(name, name, 0, 0)]


@stage("meta", _no_calls("meta"), order=90)
def run_meta(ctx: StudyContext) -> None:
    from prbench.meta import meta_evaluate, write_meta

    downstream = ctx.runs / "downstream"
    if not downstream.exists():
        ctx.outputs["meta"] = "skipped: no downstream results in this study"
        return
    target = ctx.path("meta", "meta.json")
    if _up_to_date(target, ctx.runs):
        ctx.outputs["meta"] = {"json": str(target), "reused": True}
        return
    res = meta_evaluate([ctx.runs], [downstream], seed=ctx.cfg.seed)
    ctx.outputs["meta"] = {k: str(v) for k, v in write_meta(res, ctx.path("meta")).items()}


@stage("report", _no_calls("report"), order=100)
def run_report(ctx: StudyContext) -> None:
    from prbench.report import build_report

    published = {e.spec: e.published for e in ctx.cfg.models if e.published}
    target, meta_file = ctx.path("report.html"), ctx.path("meta", "meta.json")
    if _up_to_date(target, ctx.runs):
        ctx.outputs["report"] = str(target)
        return
    meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.exists() else None
    path = build_report(ctx.runs, target, title=f"prbench study: {ctx.cfg.name}",
                        published=published or None, seed=ctx.cfg.seed, meta=meta)
    ctx.outputs["report"] = str(path)


def _inputs_hash(runs: Path) -> str:
    """Content hash of every run under `runs` as the run kinds read it: records and downstream curves (no timings).

    Runs are opened with `prbench.runkinds.scan_runs`, the reader meta and the report use; a
    damaged run folder's line enters the hash (the outputs are made again, and they name it).
    """
    import hashlib

    from prbench.runkinds import scan_runs

    h = hashlib.sha256()
    scan = scan_runs([runs], warn=lambda line: None)  # meta and the report say it; the hash only needs it
    for run in sorted(scan.runs, key=lambda r: r.path):
        for name in ("downstream.json", "examples.jsonl"):
            if (run.path / name).is_file():
                h.update(f"{run.path.relative_to(runs) / name}:{run.kind.name}".encode())
                h.update((run.path / name).read_bytes())
    for line in scan.skipped:
        h.update(line.encode())
    return h.hexdigest()


def _up_to_date(target: Path, runs: Path) -> bool:
    """True when `target` was made from exactly the results now under `runs` (recorded beside it)."""
    stamp = target.with_name(target.name + ".inputs")
    current = _inputs_hash(runs)
    if target.exists() and stamp.exists() and stamp.read_text() == current:
        return True
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current)  # written before the target: a crash leaves a stale stamp, target absent
    return False


# -- personalize: personalized-RM methods under the seen/unseen protocol ---------------------
from prbench.study.context import Stage
from prbench.study.personalize import personalize, plan_personalize

run_personalize = Stage("personalize", plan_personalize, personalize, order=80)
