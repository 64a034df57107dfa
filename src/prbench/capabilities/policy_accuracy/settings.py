"""Policy accuracy's settings: the driver's (`PolicyAccuracySettings`) and the study's `policy_accuracy:` section."""

from __future__ import annotations

from typing import ClassVar

from prbench.config import (
    ContextSpec,
    DataSpec,
    GuidanceSpec,
    PolicyPromptSpec,
    PolicyScoringSpec,
    RunSpec,
    count,
    field_of,
)


class PolicyAccuracySettings(DataSpec, ContextSpec, PolicyPromptSpec, GuidanceSpec, PolicyScoringSpec, RunSpec):
    """Policy accuracy (`prbench policy-accuracy`, `policy_accuracy`, the study's section)."""

    top_k: int = field_of(ContextSpec, "top_k")  # the policy's prompt and the RM's view alike: a number
    batch_size: int = count(4, "Responses per policy forward pass.", 65536)


class PolicyAccuracyStage(PolicyAccuracySettings):
    """The study's `policy_accuracy` section: the driver's own settings plus the policy and the RMs."""

    spec_fields: ClassVar[dict[str, str]] = {"policy": "engine", "rms": "rm"}
    policy: str
    rms: list[str]
