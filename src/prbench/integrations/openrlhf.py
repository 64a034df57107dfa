"""OpenRLHF's local reward function: `reward_func(queries, prompts, labels)` over a prbench RM.

OpenRLHF 0.11.2 loads a `--reward.remote_url` that ends in `.py` with
`importlib.util.spec_from_file_location("reward_func", path)` and calls `reward_func` with one
rollout at a time from a worker thread (`openrlhf/utils/agent.py`, `SingleTurnAgentExecutor`),
reading `rewards`, `scores` and `extra_logs` from the dict it returns. This file scores exactly
as `prbench serve-reward`'s `POST /get_reward` does (the same `RewardService.rollouts` and `rewards`), with the
RM loaded in this process: set PRBENCH_RM (RM spec), PRBENCH_POLICY_TEMPLATE (the policy,
whose chat template tells where the answer starts), PRBENCH_CONDITION (default profile),
optionally PRBENCH_ITEMS, PRBENCH_FALLBACK_REWARD, PRBENCH_REWARD_SCALE, PRBENCH_DEVICE,
PRBENCH_TOP_K, PRBENCH_RETRIEVER (as `prbench.serve.client` documents them).
To use a running server instead, point `--reward.remote_url` at `http://HOST:PORT/get_reward`.
"""

from __future__ import annotations

import threading
from typing import Any

from prbench.errors import PrbenchError

_SERVICES: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def service_from_env(**given: Any) -> Any:
    """The process's RewardService for these settings (the RM loads once)."""
    from prbench.serve.client import settings

    cfg = settings(given)
    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    with _LOCK:
        if key not in _SERVICES:
            if not cfg["rm"] or not cfg["policy_template"]:
                raise PrbenchError("reward_func needs PRBENCH_RM (the RM spec) and PRBENCH_POLICY_TEMPLATE "
                                   "(the policy whose chat template the queries use)")
            from prbench.context.retrieval import load_retriever
            from prbench.rewards.base import PointwiseRM, load_rm
            from prbench.serve.chat import load_splitter
            from prbench.serve.service import RewardService
            from prbench.sources import load_items

            rm = load_rm(cfg["rm"], **({"device": cfg["device"]} if cfg["device"] else {}))
            if not isinstance(rm, PointwiseRM):
                raise PrbenchError(f"{cfg['rm']}: a reward needs a pointwise RM (a judge in mode pointwise)")
            _SERVICES[key] = RewardService(
                rm, cfg["condition"] or "profile", items=load_items(cfg["items"]) if cfg["items"] else (),
                splitter=load_splitter(cfg["policy_template"]), fallback_reward=cfg["fallback_reward"],
                reward_scale=cfg["reward_scale"], top_k=cfg["top_k"], retriever=load_retriever(cfg["retriever"]))
        return _SERVICES[key]


def reward_func(queries: list[str], prompts: list[str], labels: list[Any]) -> dict[str, Any]:
    """Rewards for OpenRLHF rollouts: the same numbers `POST /get_reward` answers (a hostile label gets
    the fallback there and here, never an exception)."""
    import torch

    from prbench.serve.service import Invalid, Reject

    service = service_from_env()
    try:
        parsed = service.rollouts(list(queries), list(prompts), list(labels))
    except Reject as exc:
        raise PrbenchError(f"reward_func: {exc.detail}") from None
    values, flags = service.rewards(parsed, service.score_pairs([x for x in parsed if not isinstance(x, Invalid)]))
    rewards = torch.tensor(values, dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards.clone(),
            "extra_logs": {"prbench_invalid": sum(flags) / max(len(flags), 1)}}
