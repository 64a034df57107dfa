"""Policy accuracy's study stage: one run per RM of the `policy_accuracy:` section."""

from __future__ import annotations

from prbench.capabilities.policy_accuracy.driver import policy_accuracy
from prbench.capabilities.policy_accuracy.settings import PolicyAccuracySettings, PolicyAccuracyStage
from prbench.study.context import PlannedRun, StudyContext, stage
from prbench.study.stages import guided_runs, item_count, needs


def _plan_pa(ctx: StudyContext) -> list[PlannedRun]:
    a = needs(ctx.cfg.section("policy_accuracy", PolicyAccuracyStage), "policy_accuracy")
    n = item_count(ctx.data, a.limit or ctx.cfg.limit)
    return [PlannedRun("policy_accuracy", f"{a.policy} guided by {spec} (w={a.w}, k={a.k})", 2 * n * 100 * a.k,
                       2 * n * 100 * a.k * 120) for spec in a.rms]


@stage("policy_accuracy", _plan_pa, order=70, section=PolicyAccuracyStage, why="the policy and RMs")
def run_policy_accuracy(ctx: StudyContext) -> None:
    section = needs(ctx.cfg.section("policy_accuracy", PolicyAccuracyStage), "policy_accuracy")
    guided_runs(ctx, section, "policy_accuracy", "policy-accuracy", PolicyAccuracySettings, policy_accuracy)
