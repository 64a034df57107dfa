"""Eval runs (`prbench eval`): the benchmark side of meta, the leaderboard's rows, `compare`'s inputs."""

from __future__ import annotations

import math

from prbench.errors import DataError
from prbench.metrics import collapse_items
from prbench.records import EvalSummary, typed_record
from prbench.runkinds.base import RECORDS, EEEItem, EEEPart, Run, RunKind

OUTCOME = {1.0: "chosen", 0.5: "tie", 0.0: "rejected"}


class EvalKind(RunKind):
    name = "eval"
    settings_model = "prbench.config:EvalSettings"
    driver = "prbench._evaluate:evaluate"
    stage = "prbench.study.stages:run_eval"
    command = "prbench.cli.eval:EVAL_COMMAND"
    title = "eval run"
    role = "benchmark"
    records_file = True
    summary_model = EvalSummary
    record_model = staticmethod(typed_record)  # pointwise or pairwise by the record's own fields
    group_fields = ("data", "condition")  # a benchmark: one data set under one condition
    report_section = "prbench.report.evals:leaderboard_section"
    report_id = "leaderboard"

    def check(self, run: Run) -> None:
        """The summary must be what its records give: counts and accuracy (a cut or edited file is refused)."""
        super().check(run)
        s = run.summary_as(EvalSummary)
        items = collapse_items(run.records)  # what the driver summarised: one credit per multi-response item
        credits = [float(r["credit"]) for r in items if r.get("credit") is not None]  # records, not a summary
        where = str(run.path / "summary.json")
        fix = f"the summary does not match {RECORDS}; delete summary.json and rerun the eval (it is recomputed)"
        if s.n_total != len(run.records):
            raise DataError(where, None, "n_total", f"says {s.n_total} pairs but {RECORDS} holds "
                                                    f"{len(run.records)}; {fix}")
        if s.metrics.n_total is not None and s.metrics.n_total != len(items):
            raise DataError(where, None, "metrics.n_total", f"says {s.metrics.n_total} items but {RECORDS} holds "
                                                            f"{len(items)}; {fix}")
        if s.metrics.n != len(credits):
            raise DataError(where, None, "metrics.n", f"says {s.metrics.n} validly scored pairs but {RECORDS} "
                                                      f"holds {len(credits)}; {fix}")
        mean = math.fsum(credits) / len(credits) if credits else None
        for name, value in (("accuracy", s.accuracy), ("metrics.accuracy", s.metrics.accuracy)):
            if (value is None or mean is None) and value != mean or \
                    value is not None and mean is not None and abs(value - mean) > 1e-9:
                raise DataError(where, None, name, f"says {value} but the credits in {RECORDS} give {mean}; {fix}")

    def credits(self, run: Run) -> dict[str, float]:
        """Item id -> credit for every validly scored pair."""
        return {rec.id: rec.credit for rec in run.items if rec.credit is not None}

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Accuracy over validly scored pairs; one instance per pair (credit 1 chosen preferred, 0.5 tie, 0 rejected)."""
        s = run.summary_as(EvalSummary)
        m = s.metrics
        if m.accuracy is None:
            return []
        items = [EEEItem(rec.id, rec.credit, rec.credit == 1.0, OUTCOME[rec.credit], "chosen",
                         {"category": rec.category or "?", "condition": s.condition})
                 for rec in run.items if rec.credit is not None]
        return [EEEPart(
            result_id=f"accuracy:{s.condition}", name=f"{s.data} [{s.condition}]", metric_id="accuracy",
            metric_name="preference accuracy",
            description="share of preference pairs where the reward model prefers the user's chosen response "
                        "(ties 0.5), under the input condition named in the evaluation name",
            score=m.accuracy, ci=(m.ci_low, m.ci_high), n=m.n, bounds=(0.0, 1.0),
            source="examples.jsonl credit", items=items,
            extraction_method="pairwise verdict" if s.kind == "pairwise" else "score(chosen) vs score(rejected)",
            details={"n_invalid": str(m.n_invalid), "n_total": str(s.n_total), "rm_kind": s.kind,
                     "condition": s.condition})]


KIND = EvalKind()
