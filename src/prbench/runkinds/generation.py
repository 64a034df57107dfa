"""Generation runs with no downstream setting of their own: ICL (gold/rubric scored), samples, plans."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from prbench.records import GenerationSummary
from prbench.runkinds.base import EEEItem, EEEPart, Run, RunKind
from prbench.runs import read_json


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class SampleSummary(_Open):
    run: str = "sample"
    format: int = 0


class ICLKind(RunKind):
    name = "icl"
    title = "in-context learning (gold / rubric scored)"
    summary_model = GenerationSummary

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Each gold-answer metric and the rubric grade, with the per-item values of scores.json."""
        s = run.summary or {}
        rows = read_json(run.path / "scores.json").get("rows", []) if (run.path / "scores.json").is_file() else []
        out = []
        gold = ((s.get("gold") or {}).get("metrics") or {})
        grade = s.get("grade") or {}
        metrics = [(m, v, (-1.0 if m == "embedding" else 0.0, 1.0), lambda r, m=m: (r.get("gold") or {}).get(m))
                   for m, v in sorted(gold.items())]  # embedding: cosine similarity
        if grade.get("mean") is not None:
            metrics.append(("grade", grade, (0.0, 2.0), lambda r: r.get("grade")))
        for metric, summ, bounds, get in metrics:
            if not isinstance(summ, dict) or summ.get("mean") is None:
                continue
            items = [EEEItem(str(r["id"]), float(get(r)), float(get(r)) >= bounds[1], f"{get(r):g}",
                             "the user's own answer" if metric != "grade" else "the rubric's maximum")
                     for r in rows if get(r) is not None]
            out.append(EEEPart(
                result_id=f"icl:{metric}", name=f"ICL {metric}", metric_id=metric, metric_name=metric,
                description=f"mean {metric} of the in-context-learning policy's answers", score=float(summ["mean"]),
                ci=(summ.get("ci_low"), summ.get("ci_high")), n=len(items), bounds=bounds, source="scores.json",
                extraction_method="gold-answer metric" if metric != "grade" else "rubric grader", items=items))
        return out


class SampleKind(RunKind):
    name = "sample"
    title = "policy samples"
    summary_model = SampleSummary


class PlanKind(RunKind):
    name = "plan"
    title = "planner outputs"
    summary_model = SampleSummary


KIND = ICLKind()
SAMPLE = SampleKind()
PLAN = PlanKind()
