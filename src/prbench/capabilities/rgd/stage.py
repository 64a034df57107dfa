"""Reward-guided decoding's study stage: one run per RM of the `rgd:` section."""

from __future__ import annotations

from prbench.capabilities.rgd.driver import run_rgd
from prbench.capabilities.rgd.settings import RGDSettings, RGDStage
from prbench.study.context import PlannedRun, StudyContext, stage
from prbench.study.stages import guided_runs, item_count, needs


def _plan_rgd(ctx: StudyContext) -> list[PlannedRun]:
    g = needs(ctx.cfg.section("rgd", RGDStage), "rgd")
    n = item_count(ctx.data, g.limit or ctx.cfg.limit)
    return [PlannedRun("rgd", f"{g.policy} guided by {spec} (w={g.w}, k={g.k})", n * g.max_new_tokens * g.k // g.chunk,
                       n * g.max_new_tokens * g.k * 100 // g.chunk) for spec in g.rms]


@stage("rgd", _plan_rgd, order=60, section=RGDStage, why="the policy and RMs")
def run_rgd_stage(ctx: StudyContext) -> None:
    section = needs(ctx.cfg.section("rgd", RGDStage), "rgd")
    guided_runs(ctx, section, "rgd", "rgd", RGDSettings, run_rgd, grader=section.grader)
