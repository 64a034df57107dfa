"""The plan capability's study stage: the `planner:` section's model plans the study's items once, for the `planner`
condition (a planner file already covering them loads no model)."""

from __future__ import annotations

from pathlib import Path

from prbench.capabilities.plan.driver import plan
from prbench.config import PlanSettings
from prbench.study.config import PlannerStage
from prbench.study.context import PlannedRun, PlanOutput, StudyContext, stage
from prbench.study.stages import input_tokens, item_count, needs, planner_path, study_defaults, track


def _plan_plan(ctx: StudyContext) -> list[PlannedRun]:
    p = needs(ctx.cfg.section("planner", PlannerStage), "planner")
    n = item_count(ctx.data, p.limit or ctx.cfg.limit)
    return [PlannedRun("plan", f"planner {p.spec}", n, n * (input_tokens("profile", ctx.cfg.top_k) + 120), p.spec)]


@stage("plan", _plan_plan, order=10, section=PlannerStage, key="planner", why="the planner model")
def run_plan(ctx: StudyContext) -> None:
    p = needs(ctx.cfg.section("planner", PlannerStage), "planner")
    path = Path(planner_path(ctx, p))
    if path.exists():
        done = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        if done >= item_count(ctx.data, p.limit or ctx.cfg.limit):
            ctx.outputs.plan = PlanOutput(path=str(path), written=0, skipped=done)
            return  # everything planned: no model load
    res = plan(p.spec, ctx.data, str(path), settings=study_defaults(ctx, p, PlanSettings),
               planner_options=p.options, on_progress=track(ctx, f"plan {p.spec}"))
    ctx.outputs.plan = PlanOutput(path=str(res.path), written=res.written, failures=res.failures)
