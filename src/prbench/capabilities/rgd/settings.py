"""Reward-guided decoding's settings: the driver's (`RGDSettings`) and the study's `rgd:` section (`RGDStage`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from prbench.config import (
    ContextSpec,
    DataSpec,
    DecodingSpec,
    GuidanceSpec,
    PolicyPromptSpec,
    RunSpec,
    count,
    field_of,
    opt,
)


class RGDSettings(DataSpec, ContextSpec, PolicyPromptSpec, GuidanceSpec, DecodingSpec, RunSpec):
    """Reward-guided decoding (`prbench rgd`, `run_rgd`, the study's `rgd` section)."""

    top_k: int = field_of(ContextSpec, "top_k")  # the policy's prompt and the RM's view alike: a number
    batch_size: int = count(8, "Items decoded together.", 65536)
    downstream_metric: Literal["auto", "grade", "rouge1", "rougeL", "embedding", "none"] = opt(
        "auto", "downstream.json value: auto, grade, rouge1, rougeL, embedding or none.", metavar="NAME")
    encoder: str | None = opt("builtin:minilm-l6", "Sentence encoder for gold embedding similarity (none: skip).",
                              metavar="SPEC")


class RGDStage(RGDSettings):
    """The study's `rgd` section: the driver's own settings (one default each) plus what it runs."""

    spec_fields: ClassVar[dict[str, str]] = {"policy": "engine", "rms": "rm", "grader": "grader"}
    policy: str
    rms: list[str]
    grader: str | None = None
