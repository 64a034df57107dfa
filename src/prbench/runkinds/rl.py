"""RL runs (`prbench rl`): a policy trained with the RM as reward, graded on held-out items."""

from __future__ import annotations

from prbench.runkinds.downstream import DownstreamKind, RLSummary


class RLKind(DownstreamKind):
    name = "rl"
    settings_model = "prbench.config:RLSettings"
    driver = "prbench.downstream.rl:train_rl"
    stage = "prbench.study.stages:run_rl"
    command = "prbench.cli.downstream:rl"
    title = "RL fine-tuning"
    setting = "rl"
    short = "RL"
    result_model = RLSummary
    value_definition = "mean rubric grade of the RL-trained policy's held-out answers"


KIND = RLKind()
