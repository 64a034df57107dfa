"""Eval runs (`prbench eval`): the benchmark side of meta, the leaderboard's rows, `compare`'s inputs."""

from __future__ import annotations

from typing import Any

from prbench.records import EvalSummary, typed_record
from prbench.runkinds.base import Run, RunKind


class EvalKind(RunKind):
    name = "eval"
    title = "eval run"
    role = "benchmark"
    records_file = True
    summary_model = EvalSummary
    record_model = staticmethod(typed_record)  # pointwise or pairwise by the record's own fields
    group_fields = ("data", "condition")  # a benchmark: one data set under one condition
    report_section = "prbench.report.evals:leaderboard_section"

    def credits(self, run: Run) -> dict[str, float]:
        """Item id -> credit for every validly scored pair."""
        return {str(r["id"]): float(r["credit"]) for r in run.records if r.get("credit") is not None}

    def headline(self, run: Run) -> dict[str, Any]:
        """The accuracy cell of the run (value and CI) as the leaderboard and export show it."""
        m = run.summary["metrics"]
        return {"accuracy": m.get("accuracy"), "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"),
                "n": m.get("n"), "n_invalid": m.get("n_invalid")}


KIND = EvalKind()
