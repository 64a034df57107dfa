"""The settings of policy sampling for Best-of-N (`prbench sample`, `sample_policy`)."""

from __future__ import annotations

from pydantic import field_validator

from prbench.config import ContextSpec, DataSpec, PolicyPromptSpec, RunSpec, count, field_of, opt
from prbench.context.conditions import ALL_CONDITIONS
from prbench.schema import one_of


class SampleSettings(DataSpec):
    """Policy sampling for Best-of-N (`prbench sample`, `sample_policy`, the study's `sample` section).

    Only DataSpec applies whole; the other shared options are the parts' own declarations, so
    sampling gets no option it would ignore (an RM view's budget, bootstrap resamples).
    """

    n: int = count(16, "Answers per item.", 4096)
    condition: str = field_of(PolicyPromptSpec, "policy_condition")  # what the policy sees
    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    planner_file: str | None = field_of(ContextSpec, "planner_file")
    temperature: float = opt(1.0, "Sampling temperature (0 = greedy).", ge=0, le=100)
    top_p: float = opt(0.9, "Nucleus sampling mass.", gt=0, le=1)
    max_new_tokens: int = count(200, "Token cap per answer.", 65536)
    max_words: int = field_of(PolicyPromptSpec, "max_words")
    prompt_file: str | None = field_of(PolicyPromptSpec, "prompt_file")
    seed: int = field_of(RunSpec, "seed")
    batch_size: int = count(16, "Answers per model batch (a local engine's batch size).", 65536)

    @field_validator("condition")
    @classmethod
    def _policy_condition(cls, v: str) -> str:
        if v == "oracle":
            raise ValueError("the policy must not see the rubric (condition 'oracle'); use profile or none")
        return one_of(v, tuple(c for c in ALL_CONDITIONS if c != "oracle"), "condition")
