"""In-context-learning runs (`prbench icl`): gold-answer metrics and the rubric grade, per item in scores.json."""

from __future__ import annotations

from prbench.capabilities.icl.command import icl
from prbench.capabilities.icl.driver import run_icl
from prbench.capabilities.icl.settings import ICLSettings
from prbench.runkinds.base import EEEItem, EEEPart, Run, RunKind
from prbench.runkinds.generation import read_scores
from prbench.store.records import GenerationSummary, GoldMetric


class ICLKind(RunKind):
    name = "icl"
    settings_model = ICLSettings
    driver = staticmethod(run_icl)
    command = staticmethod(icl)
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


KIND = ICLKind()
