"""Eval runs (`prbench eval`): the benchmark side of meta, the leaderboard's rows, `compare`'s inputs."""

from __future__ import annotations

from typing import Any

from prbench.records import EvalSummary, typed_record
from prbench.runkinds.base import EEEItem, EEEPart, Run, RunKind


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

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Accuracy over validly scored pairs; one instance per pair (credit 1 chosen preferred, 0.5 tie, 0 rejected)."""
        s, m = run.summary, run.summary["metrics"]
        if m.get("accuracy") is None:
            return []
        items = [EEEItem(str(r["id"]), float(r["credit"]), r["credit"] == 1.0,
                         {1.0: "chosen", 0.5: "tie", 0.0: "rejected"}.get(float(r["credit"]), str(r["credit"])),
                         "chosen", {"category": str(r.get("category", "?")), "condition": str(s["condition"])})
                 for r in run.records if r.get("credit") is not None]
        pairwise = s.get("kind") == "pairwise"
        return [EEEPart(
            result_id=f"accuracy:{s['condition']}", name=f"{s['data']} [{s['condition']}]", metric_id="accuracy",
            metric_name="preference accuracy",
            description="share of preference pairs where the reward model prefers the user's chosen response "
                        "(ties 0.5), under the input condition named in the evaluation name",
            score=float(m["accuracy"]), ci=(m.get("ci_low"), m.get("ci_high")), n=int(m["n"]), bounds=(0.0, 1.0),
            source="examples.jsonl credit", items=items,
            extraction_method="pairwise verdict" if pairwise else "score(chosen) vs score(rejected)",
            details={"n_invalid": str(m.get("n_invalid", 0)), "n_total": str(s.get("n_total")),
                     "rm_kind": str(s.get("kind")), "condition": str(s["condition"])})]


KIND = EvalKind()
