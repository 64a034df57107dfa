"""Reward-guided decoding runs (`prbench rgd`): generations steered by the RM, scored by grade or gold metric."""

from __future__ import annotations

from prbench.capabilities.rgd.command import rgd
from prbench.capabilities.rgd.driver import run_rgd
from prbench.capabilities.rgd.settings import RGDSettings
from prbench.capabilities.rgd.stage import run_rgd_stage
from prbench.runkinds.downstream import DownstreamKind
from prbench.store.records import GenerationSummary


class RGDKind(DownstreamKind):
    name = "rgd"
    settings_model = RGDSettings
    driver = staticmethod(run_rgd)
    stage = run_rgd_stage
    command = staticmethod(rgd)
    title = "reward-guided decoding"
    setting = "rgd"
    short = "RGD"
    summary_model = GenerationSummary  # the folder's summary.json (when present) beside its downstream.json
    value_definition = "mean per-item score (rubric grade or gold-answer metric) of the reward-guided decoding output"


KIND = RGDKind()
