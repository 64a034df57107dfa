"""The reader contract of a benchmark build (`prbench build`): its report.json as models.

The report page (`prbench.report.data`, provenance) reads them; the build kind itself is
`prbench.capabilities.build.kind`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class Range(_Open):
    mean: float
    min: float
    max: float


class ScaleStats(_Open):
    """One validator scale over kept pairs: chosen and rejected (mean, min, max) and their gap."""

    chosen: Range | None = None
    rejected: Range | None = None
    gap: float | None = None


class Count(_Open):
    chosen_longer: float | None = None
    failed: int | None = None
    parse_failures: int | None = None


class BuildSection(_Open):
    """One category (or 'all') of a build's validation report."""

    kept: int = 0
    processed: int = 0
    dropped: int | None = None
    dropped_by_reason: dict[str, int] = {}
    scales_kept: dict[str, ScaleStats] = {}
    length_kept: Count = Count()
    generation: Count = Count()
    validation: Count = Count()


class BuildReport(_Open):
    """build/report.py's report.json: the rule, per-category sections and 'all'."""

    rule: Any
    rule_text: str | None = None
    categories: dict[str, BuildSection]
    all: BuildSection
