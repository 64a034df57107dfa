"""Policy samples (`prbench sample`): a run of no downstream setting of its own, read by Best-of-N."""

from __future__ import annotations

from prbench.capabilities.sample.command import sample
from prbench.capabilities.sample.driver import sample_policy
from prbench.capabilities.sample.stage import run_sample
from prbench.config import SampleSettings
from prbench.runkinds.base import RunKind
from prbench.runkinds.generation import SampleSummary


class SampleKind(RunKind):
    name = "sample"
    settings_model = SampleSettings
    driver = staticmethod(sample_policy)
    stage = run_sample
    command = staticmethod(sample)
    title = "policy samples"
    summary_model = SampleSummary


KIND = SampleKind()
