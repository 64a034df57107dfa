"""RL runs (`prbench rl`): a policy trained with the RM as reward, graded on held-out items."""

from __future__ import annotations

from prbench.capabilities.rl.command import rl
from prbench.capabilities.rl.driver import train_rl
from prbench.capabilities.rl.settings import RLSettings
from prbench.capabilities.rl.stage import run_rl
from prbench.runkinds.downstream import DownstreamKind, RLSummary


class RLKind(DownstreamKind):
    name = "rl"
    settings_model = RLSettings
    driver = staticmethod(train_rl)
    stage = run_rl
    command = staticmethod(rl)
    title = "RL fine-tuning"
    setting = "rl"
    short = "RL"
    result_model = RLSummary
    value_definition = "mean rubric grade of the RL-trained policy's held-out answers"


KIND = RLKind()
