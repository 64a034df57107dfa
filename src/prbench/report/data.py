"""What the report reads: every run under the runs folder, opened once through `prbench.runkinds`.

A damaged run folder is skipped with the same one line meta and the leaderboard give
(`skipped: FILE:LINE: ...`, logged and listed under the report's provenance notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prbench.context.conditions import CONDITIONS
from prbench.errors import PrbenchError
from prbench.runkinds import Run, RunKind, Scan, scan_runs
from prbench.runkinds.build import BuildReport
from prbench.runkinds.downstream import DownstreamKind, DownstreamSummary
from prbench.stats import metrics
from prbench.store.records import Accuracy, EvalSummary


@dataclass
class ReportData:
    """Everything found under the runs folder, read once."""

    root: Path
    scan: Scan
    notes: list[str] = field(default_factory=list)

    @property
    def evals(self) -> list[Run]:
        return self.scan.of("benchmark")

    @property
    def downstream(self) -> list[tuple[Path, DownstreamSummary]]:
        """(downstream.json, typed result) of every kind read from downstream.json files (BoN, RL, RGD, plug-ins)."""
        return [(r.path / "downstream.json", r.kind.result(r)) for r in self.scan.runs
                if isinstance(r.kind, DownstreamKind) and r.downstream is not None]

    def of_kind(self, kind: RunKind | str) -> list[Run]:
        name = kind if isinstance(kind, str) else kind.name
        return [r for r in self.scan.runs if r.kind.name == name]

    @property
    def policy_accuracy(self) -> list[Run]:
        return self.of_kind("policy-accuracy")

    @property
    def builds(self) -> list[tuple[Path, BuildReport]]:
        """Every build's report.json as its model (validated when the run was opened)."""
        return [(r.path / "report.json", r.summary_as(BuildReport)) for r in self.of_kind("build")
                if isinstance(r.typed, BuildReport)]

    def by_data(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for r in self.evals:
            out.setdefault(r.data, []).append(r)
        return dict(sorted(out.items()))


def collect(root: str | Path) -> ReportData:
    """Every run under `root` (eval, downstream, policy accuracy, build, plug-in kinds)."""
    base = Path(root)
    if not base.is_dir():
        raise PrbenchError(f"{base}: not a folder")
    scan = scan_runs([base])
    return ReportData(base, scan, list(scan.skipped))


def ev(run: Run) -> EvalSummary:
    """An eval run's summary as its model (what every eval section reads)."""
    return run.summary_as(EvalSummary)


def category_stats(run: Run, seed: int, n_boot: int) -> dict[str, Accuracy]:
    """Accuracy with bootstrap CI per category, recomputed from the run's records (summaries hold no category CI)."""
    by: dict[str, list[float]] = {}
    for r in run.items:
        if r.credit is not None:
            by.setdefault(r.category or "?", []).append(r.credit)
    return {c: Accuracy.model_validate(metrics.accuracy_summary(np.array(v), seed=seed, n_boot=n_boot))
            for c, v in sorted(by.items())}


def conditions_of(runs: list[Run]) -> list[str]:
    present = {r.condition for r in runs}
    return [c for c in CONDITIONS if c in present] + sorted(present - set(CONDITIONS))


def model_order(runs: list[Run]) -> list[str]:
    """Models by their best accuracy over conditions, best first (baselines sorted in, but marked)."""
    best: dict[str, float] = {}
    for r in runs:
        a = ev(r).metrics.accuracy
        best[r.key] = max(best.get(r.key, -1.0), -1.0 if a is None else a)
    return sorted(best, key=lambda m: (-best[m], m))
