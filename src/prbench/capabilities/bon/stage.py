"""Best-of-N's study stage: rerank the `sample` stage's answers with each RM, graded by the `bon:` section's grader."""

from __future__ import annotations

from typing import Any

from prbench.capabilities.bon.driver import best_of_n
from prbench.capabilities.bon.settings import BonSettings, BonStage
from prbench.rewards.base import capabilities
from prbench.study.config import SampleStage, StudyConfig
from prbench.study.context import BonOutput, PlannedRun, StudyContext, stage
from prbench.study.stages import (
    TOKENS,
    downstream_dir,
    eval_specs,
    input_tokens,
    item_count,
    needs,
    planner_file,
    samples_dir,
    study_defaults,
)


def _plan_bon(ctx: StudyContext) -> list[PlannedRun]:
    s, b = needs(ctx.cfg.section("sample", SampleStage), "sample"), needs(ctx.cfg.section("bon", BonStage), "bon")
    n = item_count(ctx.data, s.limit or ctx.cfg.limit)
    rms = b.rms or eval_specs(ctx)
    costly = {spec: capabilities(spec).calls_model for spec in rms}
    runs = [PlannedRun("bon", f"score {spec} [{b.condition}]", n * s.n if costly[spec] else 0,
                       n * s.n * input_tokens(b.condition, ctx.cfg.top_k) if costly[spec] else 0)
            for spec in rms]
    runs.append(PlannedRun("bon", f"grade with {b.grader} (distinct samples, at most)", n * s.n,
                           n * s.n * (TOKENS["response"] + TOKENS["aspects"] + 200)))
    return runs


def _checks(cfg: StudyConfig) -> list[tuple[tuple[Any, ...], str]]:
    """Without `rms`, Best-of-N reranks with the study's pointwise models: there must be one."""
    b = cfg.section("bon", BonStage)
    if b is not None and not b.rms and all(m.pairwise for m in cfg.models):
        return [(("bon",), "bon needs rms (no pointwise model in models to default to)")]
    return []


@stage("bon", _plan_bon, order=40, section=BonStage, needs=("sample", "bon"),
       why="the samples to rerank (sample) and the grader (bon)", checks=_checks)
def run_bon(ctx: StudyContext) -> None:
    b = needs(ctx.cfg.section("bon", BonStage), "bon")
    planner = {"planner_file": planner_file(ctx)} if b.condition == "planner" else {}
    settings = study_defaults(ctx, b, BonSettings, batch_size=ctx.cfg.batch_size, **planner)
    res = best_of_n(samples_dir(ctx), b.rms or eval_specs(ctx), b.grader, settings=settings,
                    out=downstream_dir(ctx, "bon"))
    ctx.outputs.bon = BonOutput(path=str(res.path), rms=list(res.results))
