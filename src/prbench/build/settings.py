"""The settings of a benchmark build (`prbench build`, `build_benchmark`): the pipeline's own input.

They live beside the pipeline, not in the build capability's package, because `BuildConfig` extends
them: the shared core would otherwise import the capability that registers it.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from prbench.config import ContextSpec, DataSpec, RunSpec, count, field_of, opt


class BuildSettings(DataSpec):
    """Benchmark construction (`prbench build`; `prbench.build.BuildConfig` adds the source and the engines)."""

    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    max_context_chars: int | None = field_of(ContextSpec, "max_context_chars")
    seed: int = field_of(RunSpec, "seed")
    max_words: int = count(100, "Word limit of each answer.", 100_000)
    min_chosen_fit: float = opt(4, "Keep only if chosen rubric_fit >= this.")
    max_rejected_fit: float = opt(2, "Keep only if rejected rubric_fit <= this.")
    max_quality_gap: float = opt(1, "Max |chosen - rejected| on factuality, relevance, helpfulness.")
    max_length_ratio: float = opt(1.5, "Max word-count ratio longer/shorter.")
    temperature: float = opt(0.7, "Generator sampling temperature (seeded per item and role).", ge=0)
    top_p: float = opt(0.9, "Generator nucleus sampling mass.", gt=0, le=1)
    repetition_penalty: float | None = opt(None, "Repetition penalty of generator and validator (default: each "
                                                 "engine's own; SmolLM2: 1.3).", gt=0)
    max_new_tokens: int = count(256, "Generator token budget per answer.", 65536)
    validator_max_new_tokens: int = count(160, "Validator token budget per reply.", 65536)
    license: str = opt("apache-2.0", "Licence id on the dataset card.", metavar="ID")
    batch_size: int = count(8, "Items per batch (records are saved after each batch).", 65536)

    @field_validator("*", mode="wrap")
    @classmethod
    def _whole_numbers_as_given(cls, v: Any, handler: Any) -> Any:
        """A float option given as 4 stays 4 (as the dataclass kept it), so build files read as before."""
        out = handler(v)
        return v if type(v) is int and type(out) is float else out
