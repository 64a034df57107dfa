"""Benchmark builds (`prbench build`): the validation report the report's build section shows."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.errors import DataError
from prbench.runkinds.base import Run, RunKind


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


class BuildKind(RunKind):
    name = "build"
    settings_model = "prbench.config:BuildSettings"
    driver = "prbench.build.pipeline:build_benchmark"
    command = "prbench.cli.build:app"  # `prbench build` and its subcommands
    title = "benchmark build"
    summary_model = None  # the build's summary.json is free-form; readers use report.json
    report_section = "prbench.report.build:build_section"
    report_id = "build"

    def check(self, run: Run) -> None:
        """report.json as its model (a damaged one is one line naming the field)."""
        super().check(run)
        try:
            run.typed = BuildReport.model_validate(run.report)
        except ValidationError as e:
            err = e.errors()[0]
            raise DataError(str(run.path / "report.json"), None, ".".join(map(str, err["loc"])),
                            f"{err['msg']}; rerun the build") from None

    @staticmethod
    def reads_report(obj: Any) -> bool:
        return isinstance(obj, dict) and "rule" in obj and isinstance(obj.get("categories"), dict) and "all" in obj


KIND = BuildKind()
