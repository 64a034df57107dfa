"""Benchmark builds (`prbench build`): the validation report the report's build section shows."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from prbench.runkinds.base import RunKind


class BuildReport(BaseModel):
    """build/report.py's report.json: the rule, per-category sections and 'all'."""

    model_config = ConfigDict(extra="allow", frozen=True)
    rule: Any
    categories: dict[str, dict[str, Any]]
    all: dict[str, Any]


class BuildKind(RunKind):
    name = "build"
    title = "benchmark build"
    summary_model = None  # the build's summary.json is free-form; readers use report.json
    report_section = "prbench.report.build:build_section"

    @staticmethod
    def reads_report(obj: Any) -> bool:
        return isinstance(obj, dict) and "rule" in obj and isinstance(obj.get("categories"), dict) and "all" in obj


KIND = BuildKind()
