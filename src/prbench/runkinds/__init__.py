"""Run kinds: typed, registered descriptions of finished run folders, and the one reader of them.

A kind (`base.RunKind`) declares its summary and record models (the on-disk bytes stay as the
drivers write them), its group key (what makes a setting), what meta takes from it and its
report section. Built-in kinds: eval, bon, rl, rgd, policy-accuracy, icl, sample, plan, build;
plug-ins register through the `prbench.runkinds` entry-point group (docs/extending.md).
`open_run(path)` and `scan_runs(paths)` are how meta, the report, the leaderboard, `compare`,
`export eee` and study freshness read runs.
"""

from prbench.runkinds.base import (
    MetaOptions,
    NotARun,
    Run,
    RunKind,
    Scan,
    Setting,
    kind,
    kinds,
    open_run,
    run_folders,
    scan_runs,
)

__all__ = ["MetaOptions", "NotARun", "Run", "RunKind", "Scan", "Setting", "kind", "kinds", "open_run",
           "run_folders", "scan_runs"]
