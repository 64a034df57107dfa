"""Planner outputs (`prbench plan`): a run of no downstream setting of its own, read by the `planner` condition."""

from __future__ import annotations

from prbench.capabilities.plan.command import app
from prbench.capabilities.plan.driver import plan
from prbench.capabilities.plan.settings import PlanSettings
from prbench.runkinds.base import RunKind
from prbench.runkinds.generation import SampleSummary


class PlanKind(RunKind):
    name = "plan"
    settings_model = PlanSettings
    driver = staticmethod(plan)
    stage = "prbench.study.stages:run_plan"  # a direct reference once the stage moves here (stage.py)
    command = app  # `prbench plan` and `prbench plan train`
    title = "planner outputs"
    summary_model = SampleSummary


KIND = PlanKind()
