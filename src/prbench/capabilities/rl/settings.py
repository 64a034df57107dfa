"""RL's settings: the driver's (`RLSettings`) and the study's `rl:` section (`RLStage`)."""

from __future__ import annotations

from typing import ClassVar

from prbench.config import ContextSpec, DataSpec, PolicyPromptSpec, RunSpec, count, opt
from prbench.context.conditions import CONDITIONS


class RLSettings(DataSpec, ContextSpec, PolicyPromptSpec, RunSpec):
    """GRPO with an RM as the reward, then held-out grading (`prbench rl`, `train_rl`, the study's `rl`)."""

    conditions: ClassVar[tuple[str, ...]] = tuple(c for c in CONDITIONS if c != "wrong-profile")
    split: str = opt("train", "Split to train on: of a hub dataset, or the rows of a local file that name a "
                              "`split`.")
    top_k: int | None = count(
        None, "Profile posts kept after retrieval (default: for the RM, the number its trained folder asks for, "
              "e.g. stance's whole profile, as eval; else 10; the policy prompt shows 10).", 10_000)
    condition: str = opt("profile", "What the RM sees: none, profile, planner, oracle.", "-c", metavar="NAME")
    steps: int = count(50, "Optimizer steps.", 10**6)
    lr: float = opt(1e-6, "Learning rate.", gt=0)
    lora: bool = opt(False, "Train a LoRA adapter (merged afterwards).")
    lora_r: int = count(16, "LoRA rank.", 4096)
    num_generations: int = count(4, "Answers per prompt (GRPO group size, at least 2).", 1024)
    prompts_per_step: int = count(2, "Prompts per optimizer step.", 4096)
    max_completion_length: int = count(160, "Token cap per training answer.", 65536)
    temperature: float = opt(1.0, "Sampling temperature of training answers.", gt=0)
    top_p: float = opt(0.9, "Nucleus mass of training answers (and of sampled held-out ones).", gt=0, le=1)
    beta: float = opt(0.0, "KL weight to the initial policy (0 = no reference model).", ge=0)
    reward_scale: float = opt(1.0, "Multiply RM scores (the paper used 0.1).")
    holdout: float = opt(0.2, "Share of items held out for grading (without --eval-data).", gt=0, lt=1)
    eval_data: str | None = opt(None, "Held-out items to grade (else a hash split of --data).", metavar="DATA")
    eval_n: int = count(1, "Answers per held-out item.", 4096)
    eval_temperature: float = opt(0.0, "Held-out sampling temperature (0 = greedy).", ge=0)
    eval_max_new_tokens: int = count(200, "Token cap per held-out answer.", 65536)
    compare_base: bool = opt(True, "Also grade the untrained policy on the same items.")
    gradient_checkpointing: bool | None = opt(None, "Trade compute for memory (TRL's default: on).")


class RLStage(RLSettings):
    """The study's `rl` section: the driver's own settings (one default each) plus what it trains."""

    spec_fields: ClassVar[dict[str, str]] = {"policy": "engine", "rms": "rm", "grader": "grader"}
    policy: str
    rms: list[str]
    grader: str | None = None
