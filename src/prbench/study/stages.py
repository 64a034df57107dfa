"""The stages a study can run. Each calls the same API as the matching CLI command."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from rich.markup import escape

from prbench import config
from prbench.errors import PrbenchError
from prbench.store.runs import slug
from prbench.study.config import ModelEntry, PlannerStage, SampleStage
from prbench.study.context import MetaOutput, PlannedRun, StudyContext, stage

# Known hosted datasets, so a dry run needs no network: items and rough tokens per part.
KNOWN_DATA = {
    "QiyaoMa/Personalized-RewardBench": 2830,
    "alireza7/LaMP-QA": 2830,
}
TOKENS = {"question": 40, "post": 60, "response": 130, "aspects": 80}


@lru_cache(maxsize=8)
def item_count(data: str, limit: int | None, fmt: str | None = None) -> int:
    if data in KNOWN_DATA:
        n = KNOWN_DATA[data]
    else:
        from prbench.data import load_examples

        n = len(load_examples(data, format=fmt))
    return min(n, limit) if limit else n


def input_tokens(condition: str, top_k: int) -> int:
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


def planner_path(ctx: StudyContext, planner: PlannerStage) -> str:
    return str(ctx.path("planner", f"{slug(planner.spec)}.jsonl"))


def planner_file(ctx: StudyContext) -> str | None:
    p = ctx.cfg.section("planner", PlannerStage)
    return None if p is None else planner_path(ctx, p)


# -- the study's models as the downstream stages take them (the eval stage: prbench.capabilities.eval.stage) ----
def eval_specs(ctx: StudyContext) -> list[str]:
    """Pointwise models of the study: the default RMs for downstream stages."""
    return [e.spec for e in ctx.cfg.models if not e.pairwise]


def options_of(ctx: StudyContext, spec: str) -> dict[str, Any]:
    return next((e.options for e in ctx.cfg.models if e.spec == spec), {})


def downstream_dir(ctx: StudyContext, *parts: str) -> str:
    return str(ctx.runs.joinpath("downstream", *parts))


def track(ctx: StudyContext, label: str) -> Callable[[int, int], None] | None:
    """A progress callback for one step of a stage (items done / total), or None without a display."""
    bar = ctx.progress
    if not bar:
        return None
    task = bar.add_task(escape(f"  {label}"), total=None)
    return lambda done, total: bar.update(task, completed=done, total=total)


# -- sample ------------------------------------------------------------------------------------
def samples_dir(ctx: StudyContext) -> str:
    s = needs(ctx.cfg.section("sample", SampleStage), "sample")
    return downstream_dir(ctx, "samples", slug(f"{s.policy}-n{s.n}"))


# -- reward-guided decoding and policy accuracy ---------------------------------------------
def study_defaults(ctx: StudyContext, section: Any, settings_cls: type[config.Settings], **more_shared: Any) -> Any:
    """A stage section's driver settings, with the study's shared values where the section sets none."""
    shared = {"seed": ctx.cfg.seed, "limit": ctx.cfg.limit, "categories": ctx.cfg.categories,
              "top_k": ctx.cfg.top_k, "retriever": ctx.cfg.retriever, **more_shared}
    own = section.model_dump(include=set(settings_cls.model_fields))
    inherit = {k: v for k, v in shared.items()
               if k in settings_cls.model_fields and k not in section.model_fields_set and v is not None}
    return settings_cls.build(**{**own, **inherit})


def guided_runs(ctx: StudyContext, section: Any, name: str, folder: str, settings_cls: type[config.Settings],
                driver: Any, **extra: Any) -> None:
    """Run a guided-policy driver (RGD, policy accuracy) once per RM of its study section."""
    settings = study_defaults(ctx, section, settings_cls)
    setattr(ctx.outputs, name, [str(getattr(driver(section.policy, spec, ctx.data, downstream_dir(ctx, folder),
                                            settings=settings, rm_options=options_of(ctx, spec), **extra),
                                     "path", "")) for spec in section.rms])


# -- meta and report ------------------------------------------------------------------------
def _no_calls(name: str) -> Any:
    return lambda ctx: [PlannedRun(name, name, 0, 0)]


@stage("meta", _no_calls("meta"), order=90)
def run_meta(ctx: StudyContext) -> None:
    from prbench.meta import meta_evaluate, write_meta

    downstream = ctx.runs / "downstream"
    if not downstream.exists():
        ctx.outputs.meta = "skipped: no downstream results in this study"
        return
    target = ctx.path("meta", "meta.json")
    if _up_to_date(target, ctx.runs):
        ctx.outputs.meta = MetaOutput(json=str(target), reused=True)
        return
    res = meta_evaluate([ctx.runs], [downstream], seed=ctx.cfg.seed)
    ctx.outputs.meta = MetaOutput.model_validate({k: str(v) for k, v in write_meta(res, ctx.path("meta")).items()})


@stage("report", _no_calls("report"), order=100)
def run_report(ctx: StudyContext) -> None:
    from prbench.meta.result import MetaResult
    from prbench.report import build_report

    published = {e.spec: e.published for e in ctx.cfg.models if e.published}
    target, meta_file = ctx.path("report.html"), ctx.path("meta", "meta.json")
    if _up_to_date(target, ctx.runs):
        ctx.outputs.report = str(target)
        return
    meta = MetaResult.read(meta_file) if meta_file.exists() else None
    path = build_report(ctx.runs, target, title=f"prbench study: {ctx.cfg.name}",
                        published=published or None, seed=ctx.cfg.seed, meta=meta)
    ctx.outputs.report = str(path)


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
