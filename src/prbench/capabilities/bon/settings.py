"""Best-of-N's settings: the driver's (`BonSettings`) and the study's `bon:` section (`BonStage`)."""

from __future__ import annotations

from typing import ClassVar

from prbench.config import RM_BATCH_SIZE, RM_TOP_K, ContextSpec, RunSpec, opt


class BonSettings(ContextSpec, RunSpec):
    """Best-of-N curves of RMs on a samples folder (`best_of_n`, `prbench bon`, the study's `bon`)."""

    ks: list[int] | None = opt(None, "Comma-separated k values (default 1,2,4,...,N).", "--k", metavar="LIST")
    batch_size: int = RM_BATCH_SIZE
    top_k: int | None = RM_TOP_K  # None: each RM's own, as eval


class BonStage(BonSettings):
    """The study's `bon` section: the driver's own settings plus the RMs and the grader."""

    spec_fields: ClassVar[dict[str, str]] = {"rms": "rm", "grader": "grader"}
    rms: list[str] | None = None  # default: every pointwise model of the study
    grader: str
