"""Generation runs with no downstream setting of their own: ICL (gold/rubric scored), samples, plans."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.errors import DataError
from prbench.runkinds.base import EEEItem, EEEPart, Run, RunKind
from prbench.store.records import GenerationSummary, GoldMetric
from prbench.store.runs import read_json, regular_file


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class SampleSummary(_Open):
    run: str = "sample"
    format: int = 0


class ScoreRow(_Open):
    """One item of a generation run's scores.json: its gold-answer metrics and rubric grade."""

    id: str
    gold: dict[str, float | None] | None = None
    grade: float | None = None

    def value(self, metric: str) -> float | None:
        if metric == "grade":
            return self.grade
        return (self.gold or {}).get(metric)  # scores.json's own per-item metrics, not a summary


class ScoresFile(_Open):
    rows: list[ScoreRow] = []


def read_scores(run: Run) -> list[ScoreRow]:
    """scores.json as rows (none when the run wrote none); a damaged one is a DataError naming the field."""
    path = run.path / "scores.json"
    if not regular_file(path, "rerun the command that wrote this run"):
        return []
    try:
        return ScoresFile.model_validate(read_json(path, "rerun the command that wrote this run")).rows
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(str(path), None, ".".join(map(str, err["loc"])), err["msg"]) from None


class ICLKind(RunKind):
    name = "icl"
    settings_model = "prbench.config:ICLSettings"
    driver = "prbench.downstream.icl:run_icl"
    command = "prbench.cli.rgd:icl"
    title = "in-context learning (gold / rubric scored)"
    summary_model = GenerationSummary

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Each gold-answer metric and the rubric grade, with the per-item values of scores.json."""
        s = run.summary_as(GenerationSummary)
        rows = read_scores(run)
        metrics: list[tuple[str, GoldMetric, tuple[float, float]]] = [
            (m, v, (-1.0 if m == "embedding" else 0.0, 1.0))  # embedding: cosine similarity
            for m, v in sorted((s.gold.metrics if s.gold else {}).items())]
        if s.grade is not None:
            metrics.append(("grade", s.grade, (0.0, 2.0)))
        out = []
        for metric, summ, bounds in metrics:
            if summ.mean is None:
                continue
            items = [EEEItem(r.id, v, v >= bounds[1], f"{v:g}",
                             "the user's own answer" if metric != "grade" else "the rubric's maximum")
                     for r in rows if (v := r.value(metric)) is not None]
            out.append(EEEPart(
                result_id=f"icl:{metric}", name=f"ICL {metric}", metric_id=metric, metric_name=metric,
                description=f"mean {metric} of the in-context-learning policy's answers", score=summ.mean,
                ci=(summ.ci_low, summ.ci_high), n=len(items), bounds=bounds, source="scores.json",
                extraction_method="gold-answer metric" if metric != "grade" else "rubric grader", items=items))
        return out


class SampleKind(RunKind):
    name = "sample"
    settings_model = "prbench.config:SampleSettings"
    driver = "prbench.downstream.sampling:sample_policy"
    stage = "prbench.study.stages:run_sample"
    command = "prbench.cli.downstream:sample"
    title = "policy samples"
    summary_model = SampleSummary


class PlanKind(RunKind):
    name = "plan"
    settings_model = "prbench.config:PlanSettings"
    driver = "prbench.capabilities.plan.planner:plan"
    stage = "prbench.study.stages:run_plan"
    command = "prbench.cli.plan:app"  # `prbench plan` and `prbench plan train`
    title = "planner outputs"
    summary_model = SampleSummary


KIND = ICLKind()
SAMPLE = SampleKind()
PLAN = PlanKind()
