"""Planner outputs (`prbench plan`): a run of no downstream setting of its own, read by the `planner` condition."""

from __future__ import annotations

from prbench.capabilities.plan.command import app
from prbench.capabilities.plan.driver import plan
from prbench.capabilities.plan.stage import run_plan
from prbench.config import PlanSettings
from prbench.runkinds.base import RunKind
from prbench.runkinds.generation import SampleSummary


class PlanKind(RunKind):
    name = "plan"
    settings_model = PlanSettings
    driver = staticmethod(plan)
    stage = run_plan
    command = app  # `prbench plan` and `prbench plan train`
    title = "planner outputs"
    summary_model = SampleSummary


KIND = PlanKind()
