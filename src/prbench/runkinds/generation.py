"""Reader contracts of the generation runs (no downstream setting of their own): ICL, samples, plans.

`SampleSummary` is the summary model of sample and plan runs; `read_scores` reads the per-item
scores.json of a scored generation run (ICL's Every Eval Ever parts). The kinds themselves are
`prbench.capabilities.{icl,sample,plan}.kind`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.errors import DataError
from prbench.runkinds.base import Run
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
