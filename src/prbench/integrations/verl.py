"""verl's custom reward function: `compute_score` (and `compute_score_async`) over a prbench RM.

verl 0.9.1 loads it by file path (`reward.custom_reward_function.path=<this file>`,
`reward.custom_reward_function.name=compute_score`; `verl/trainer/ppo/reward.py`) and its reward
loop's `NaiveRewardManager` (`verl/experimental/reward_loop/reward_manager/naive.py`) calls it once
per response as `compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)`, plus the config's `reward_kwargs`; a coroutine function is awaited there, so
`name=compute_score_async` scores without blocking the loop. The reward loop of 0.9.1 registers
`naive`, `dapo`, `gdpo`, `rate_limited` (`reward_manager/limited.py`, lines 172-173) and `remote`
managers only: there is no batch manager to use. verl's own reward-model path (no custom function,
`reward.reward_model.enable=True`) calls `/classify` instead: `prbench serve-reward --users --rm-template`.

`extra_info` is the row's user context as `prbench export verl` writes it (`id`, `question`,
`profile`; `rubric_aspects` for the oracle condition); `ground_truth` is the item id. Where the
reward comes from is set by `reward_kwargs` or environment variables (`prbench.serve.client`:
`url` of a running `prbench serve-reward`, or `rm` to load one in-process). The result is
`{"score": reward, "prbench_invalid": 0.0 | 1.0}`: verl rewards `score` and logs the rest, so
items the RM could not score (given the fallback reward) show up in verl's metrics.
Over HTTP the process keeps one pooled client; the many `compute_score_async` calls verl starts
at once travel together in requests of up to 64 items, busy servers are retried with backoff,
and a server that stays unreachable raises one clear error (`prbench.serve.client`).
"""

from __future__ import annotations

from typing import Any

from prbench.serve.client import get_client


def _row(solution_str: str, ground_truth: Any, extra_info: Any) -> tuple[dict[str, Any], str]:
    ctx = dict(extra_info or {})
    if ctx.get("id") is None and ground_truth is not None:
        ctx["id"] = ground_truth
    return ctx, solution_str.strip()


def _result(scored: list[tuple[float, bool]]) -> dict[str, float]:
    value, valid = scored[0]
    return {"score": float(value), "prbench_invalid": 0.0 if valid else 1.0}


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> dict[str, float]:
    """The RM's reward for one verl response (blocking)."""
    return _result(get_client(**kwargs).score([_row(solution_str, ground_truth, extra_info)]))


async def compute_score_async(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                              **kwargs: Any) -> dict[str, float]:
    """The same reward, awaited by verl's reward loop."""
    return _result(await get_client(**kwargs).ascore([_row(solution_str, ground_truth, extra_info)]))
