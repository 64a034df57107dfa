"""`prbench icl`: the in-context-learning baseline (no RM), with `prbench rgd`'s options and table cells."""

from __future__ import annotations

from prbench.capabilities.icl.settings import ICLSettings
from prbench.cli.options import Data, Json, Overwrite, Quiet, engine_options, settings_command
from prbench.cli.output import emit_json, progress, table
from prbench.cli.rgd import Grader, OutDir, Policy, _fmt, _gold_cell, _grader
from prbench.config import EngineAccess, GraderAccess


@settings_command(settings=ICLSettings, access=EngineAccess, grader_access=GraderAccess)
def icl(
    policy: Policy,
    out: OutDir,
    settings: ICLSettings,
    access: EngineAccess,
    grader_access: GraderAccess,
    data: Data = "sample",
    grader: Grader = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """In-context-learning baseline, no RM. The policy with the user's own examples in the prompt."""
    from prbench.capabilities.icl.driver import run_icl

    g = _grader(grader, access, grader_access)
    with progress(quiet or json_out) as bar:
        task = bar.add_task("icl", total=None)
        res = run_icl(policy, data, out, settings=settings,
                      engine_options=engine_options(policy, **access.model_dump(), batch_size=settings.batch_size),
                      grader=g, overwrite=overwrite, on_progress=lambda d, t: bar.update(task, completed=d, total=t))
    if json_out:
        emit_json({**res.written, "path": str(res.path)})
        return
    if quiet:
        return
    s = res.summary
    table("in-context learning: gold ROUGE F1 [95% CI], rubric grade (0-2)",
          ["examples", "items", "ROUGE-1", "ROUGE-L", "grade", "kinds", "s/item", "folder"],
          [(s.examples, s.n_generated, _gold_cell(s, "rouge1"), _gold_cell(s, "rougeL"), _fmt(s.grade and s.grade.mean),
            s.example_kinds, _fmt(s.seconds_per_item), str(res.path))])
