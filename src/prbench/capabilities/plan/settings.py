"""The settings of the planner over a benchmark's items (`prbench plan`, `plan`)."""

from __future__ import annotations

from prbench.config import ContextSpec, DataSpec, RunSpec, count, field_of


class PlanSettings(DataSpec):
    """The planner over a benchmark's items (`plan`, `prbench plan`, the study's `planner` section)."""

    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    seed: int = field_of(RunSpec, "seed")
    batch_size: int = count(8, "Items per planner batch (records are saved after each).", 65536)
