"""Meta-evaluation inputs: eval runs (the benchmark side) and downstream settings, all through `open_run`.

Which runs are downstream settings, and how their runs group into one setting, is each run
kind's to say (`prbench.runkinds`); this module only collects them. A damaged run folder is
skipped with one line naming file and line (logged, and kept in the result's notes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prbench.errors import PrbenchError
from prbench.runkinds import MetaOptions, Run, Scan, Setting, kinds, run_folders, scan_runs
from prbench.runkinds.downstream import DownstreamKind


def load_eval_runs(paths: Sequence[str | Path], conditions: Sequence[str] | None = None) -> list[Run]:
    """Every eval run at or below `paths` (other run kinds are skipped), optionally only some conditions."""
    return [r for r in scan_runs(paths).of("benchmark") if not conditions or r.condition in conditions]


def split_runs(scan: Scan, benchmark_runs: Sequence[str | Path], downstream: Sequence[str | Path],
               conditions: Sequence[str] | None) -> tuple[list[Run], list[Run]]:
    """(eval runs below `benchmark_runs`, downstream runs below `downstream`) of one scan (each folder read once)."""
    bench, down = set(run_folders(benchmark_runs)), set(run_folders(downstream))
    evals = [r for r in scan.of("benchmark") if r.path in bench and (not conditions or r.condition in conditions)]
    return evals, [r for r in scan.of("downstream") if r.path in down]


def check_options(opts: MetaOptions) -> None:
    if opts.bon_k not in ("all", "max"):
        raise PrbenchError(f"bon_k must be 'all' or 'max', got {opts.bon_k!r}")
    if opts.bon_curve not in ("expected", "first_k"):
        raise PrbenchError(f"bon_curve must be 'expected' or 'first_k', got {opts.bon_curve!r}")
    if opts.pa_metric not in ("total", "normalized"):
        raise PrbenchError(f"pa_metric must be 'total' or 'normalized', got {opts.pa_metric!r}")


def load_settings(paths: Sequence[str | Path], *, bon_curve: str = "expected", pa_metric: str = "total",
                  bon_k: str = "all") -> tuple[list[Setting], list[str]]:
    """Downstream settings found at `paths`, each kind grouping its own runs; plus notes.

    Best-of-N gives one setting per k shared by its RMs (`bon_k="all"`) or only the largest (`"max"`).
    """
    opts = MetaOptions(bon_curve=bon_curve, bon_k=bon_k, pa_metric=pa_metric)
    check_options(opts)
    scan = scan_runs(paths)
    notes = list(scan.skipped)
    return settings_of(scan.of("downstream"), opts, notes), notes


def settings_of(down: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
    """Each downstream kind's settings from its runs: downstream.json kinds by setting name, then the others."""
    runs: dict[str, list[Run]] = {}
    for run in down:
        runs.setdefault(run.kind.name, []).append(run)
    settings: list[Setting] = []
    for k in sorted((k for k in kinds() if k.role == "downstream"),
                    key=lambda k: (not isinstance(k, DownstreamKind), k.setting or k.name)):
        settings.extend(k.meta_settings(runs.get(k.name, []), opts, notes))
    _dedupe_labels(settings)
    return settings


def _dedupe_labels(settings: list[Setting]) -> None:
    """Settings that differ only in unlabelled parameters get #2, #3 ... so labels stay unique."""
    seen: dict[str, int] = {}
    for s in settings:
        n = seen.get(s.label, 0) + 1
        seen[s.label] = n
        if n > 1:
            s.label = f"{s.label} #{n}"


def value_definitions() -> dict[str, str]:
    """`<setting>_value` for every downstream kind (plug-ins included): what its per-item value means."""
    return {f"{k.setting or k.name}_value": k.value_definition for k in kinds()
            if k.role == "downstream" and k.value_definition}
