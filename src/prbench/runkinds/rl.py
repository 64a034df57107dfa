"""RL runs (`prbench rl`): a policy trained with the RM as reward, graded on held-out items."""

from __future__ import annotations

from prbench.runkinds.downstream import DownstreamKind, RLSummary


class RLKind(DownstreamKind):
    name = "rl"
    title = "RL fine-tuning"
    setting = "rl"
    short = "RL"
    result_model = RLSummary
    value_definition = "mean rubric grade of the RL-trained policy's held-out answers"


KIND = RLKind()
