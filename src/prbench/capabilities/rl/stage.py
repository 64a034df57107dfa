"""RL's study stage: one GRPO run per RM of the `rl:` section."""

from __future__ import annotations

from prbench.capabilities.rl.driver import train_rl
from prbench.capabilities.rl.settings import RLSettings, RLStage
from prbench.store.runs import slug
from prbench.study.context import PlannedRun, StudyContext, stage
from prbench.study.stages import downstream_dir, input_tokens, needs, options_of, study_defaults


def _plan_rl(ctx: StudyContext) -> list[PlannedRun]:
    section = needs(ctx.cfg.section("rl", RLStage), "rl")
    r = study_defaults(ctx, section, RLSettings)
    answers = r.steps * r.prompts_per_step * r.num_generations
    return [PlannedRun("rl", f"GRPO {section.policy} with {spec} ({r.steps} steps)", answers,
                       answers * (input_tokens(r.condition, r.top_k) + r.max_completion_length))
            for spec in section.rms]


@stage("rl", _plan_rl, order=50, section=RLStage, why="the policy and RMs")
def run_rl(ctx: StudyContext) -> None:
    section = needs(ctx.cfg.section("rl", RLStage), "rl")
    settings = study_defaults(ctx, section, RLSettings)
    ctx.outputs.rl = [str(train_rl(section.policy, spec, ctx.data, downstream_dir(ctx, "rl", slug(spec)),
                                      settings=settings, grader=section.grader,
                                      rm_options=options_of(ctx, spec)).path) for spec in section.rms]
