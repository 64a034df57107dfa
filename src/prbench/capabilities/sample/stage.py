"""The sample capability's study stage: the `sample:` section's policy draws N answers per item once, for every
downstream stage that reranks or reads them (Best-of-N)."""

from __future__ import annotations

from prbench.capabilities.sample.driver import sample_policy
from prbench.config import SampleSettings
from prbench.study.config import SampleStage
from prbench.study.context import PlannedRun, SampleOutput, StudyContext, stage
from prbench.study.stages import input_tokens, item_count, needs, samples_dir, study_defaults, track


def _plan_sample(ctx: StudyContext) -> list[PlannedRun]:
    section = needs(ctx.cfg.section("sample", SampleStage), "sample")
    s = study_defaults(ctx, section, SampleSettings)
    n = item_count(ctx.data, s.limit)
    return [PlannedRun("sample", f"{section.policy} x {s.n}", n * s.n,
                       n * s.n * (input_tokens(s.condition, s.top_k) + s.max_new_tokens))]


@stage("sample", _plan_sample, order=30, section=SampleStage, why="the policy and N")
def run_sample(ctx: StudyContext) -> None:
    section = needs(ctx.cfg.section("sample", SampleStage), "sample")
    settings = study_defaults(ctx, section, SampleSettings)
    ss = sample_policy(section.policy, ctx.data, samples_dir(ctx), settings=settings, engine_options=section.options,
                       on_progress=track(ctx, f"sample {section.policy} x {settings.n}"))
    ctx.outputs.sample = SampleOutput(path=samples_dir(ctx), items=len(ss.items), n=ss.n)
