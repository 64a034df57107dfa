"""Benchmark builds (`prbench build`): the run kind whose report.json the report's build section shows."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from prbench.build.pipeline import build_benchmark
from prbench.build.settings import BuildSettings
from prbench.capabilities.build.command import app
from prbench.capabilities.build.report import build_section
from prbench.errors import DataError
from prbench.runkinds.base import Run, RunKind
from prbench.runkinds.build import BuildReport


class BuildKind(RunKind):
    name = "build"
    settings_model = BuildSettings
    driver = staticmethod(build_benchmark)
    command = app  # `prbench build` and its subcommands
    title = "benchmark build"
    summary_model = None  # the build's summary.json is free-form; readers use report.json
    report_section = staticmethod(build_section)
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
