"""Eval's settings: one RM under one condition on one benchmark (`evaluate`, `prbench eval`, the study's eval
stage), composed of the shared parts in `prbench.config`."""

from __future__ import annotations

from typing import ClassVar

from prbench.config import MAX_ITEMS, RM_BATCH_SIZE, RM_TOP_K, ContextSpec, DataSpec, RunSpec, count, opt
from prbench.context.conditions import ALL_CONDITIONS


class EvalSettings(DataSpec, ContextSpec, RunSpec):
    """One RM under one condition on one benchmark (`evaluate`, `prbench eval`, the study's eval stage)."""

    conditions: ClassVar[tuple[str, ...]] = ALL_CONDITIONS
    condition: str = opt("none", f"What the RM sees: {', '.join(ALL_CONDITIONS)}.", "-c", metavar="NAME")
    # None = resolved later (the model folder's own k, else 10): wider than ContextSpec's int, which pydantic
    # allows and mypy refuses (debt: a ContextSpec reader here must handle None)
    top_k: int | None = RM_TOP_K
    format: str | None = opt(None, "Data format NAME[:OPTIONS] (prb, rewardbench2, prism:user ...; default: "
                                   "detected). See `prbench data formats`.", "-F", metavar="NAME")
    both_orders: bool = opt(False, "Any judge that compares two answers (pairwise or likelihood mode): ask in both "
                                   "answer orders as two queries; orders that disagree count as a tie (0.5).")
    batch_size: int = RM_BATCH_SIZE
    workers: int = count(1, "Ray actors to shard examples over (one model load each).", 4096)
    ray_address: str | None = opt(None, "Join an existing Ray cluster (e.g. 'auto'; else RAY_ADDRESS).",
                                  metavar="ADDRESS")
    gpus_per_worker: float | None = opt(None, "GPUs per Ray actor (fractional ok; 0 for API judges; default: a "
                                              "share of the cluster's).", ge=0)
    # sequential evaluation (`prbench.evaluation.until`): how many items, not what a record says, so no run
    # folder's identity holds them
    until: str | None = opt(
        None, "Stop early: ci=W (every run's accuracy known to +-W) or decided[=M] (every pair of models separated "
              "or within +-M, default 0.02), by anytime-valid confidence sequences over items in one seeded order; "
              "a rerun with a tighter rule extends the same folders.", metavar="RULE")
    until_max: int | None = count(None, "With --until: score at most N items per run.", MAX_ITEMS)
