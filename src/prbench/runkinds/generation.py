"""Generation runs with no downstream setting of their own: ICL (gold/rubric scored), samples, plans."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from prbench.records import GenerationSummary
from prbench.runkinds.base import RunKind


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class SampleSummary(_Open):
    run: str = "sample"
    format: int = 0


class ICLKind(RunKind):
    name = "icl"
    title = "in-context learning (gold / rubric scored)"
    summary_model = GenerationSummary


class SampleKind(RunKind):
    name = "sample"
    title = "policy samples"
    summary_model = SampleSummary


class PlanKind(RunKind):
    name = "plan"
    title = "planner outputs"
    summary_model = SampleSummary


KIND = ICLKind()
SAMPLE = SampleKind()
PLAN = PlanKind()
