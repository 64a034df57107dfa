"""`prbench rgd`: reward-guided decoding for each RM x weight, scored against gold answers or a rubric."""

from __future__ import annotations

from typing import Annotated

import typer

from prbench.capabilities.rgd.driver import run_rgd
from prbench.capabilities.rgd.settings import RGDSettings
from prbench.cli.options import Data, Json, MaxLength, ModelOptions, Overwrite, Quiet, settings_command
from prbench.cli.output import emit_json, table
from prbench.cli.rgd import Grader, OutDir, Policy, RMs, Ws, _fmt, _gold_cell, _grader, _sweep
from prbench.config import EngineAccess, GraderAccess


@settings_command(settings=RGDSettings, access=EngineAccess, grader_access=GraderAccess, exclude=("w",))
def rgd(
    policy: Policy,
    rm: RMs,
    out: OutDir,
    settings: RGDSettings,
    access: EngineAccess,
    grader_access: GraderAccess,
    data: Data = "sample",
    w: Ws = "1.0",
    grader: Grader = None,
    max_length: MaxLength = None,
    mode: Annotated[str | None, typer.Option(help="Judges: must be pointwise.")] = None,
    model_option: ModelOptions = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Reward-guided decoding (ARGS-style). Generate, score against gold answers / rubric, write downstream.json."""
    g = _grader(grader, access, grader_access)
    results = _sweep(policy, rm, w, settings, access, quiet or json_out, lambda engine, rm_obj, wv, on_progress: run_rgd(
        engine, rm_obj, data, out, settings=settings, w=wv, grader=g, overwrite=overwrite, on_progress=on_progress),
        mode=mode, max_length=max_length, model_option=model_option)
    if json_out:
        emit_json([{**res.written, "path": str(res.path)} for res in results])
        return
    if quiet:
        return
    rows = []
    for res in results:
        s = res.summary
        rows.append((s.rm, s.condition, f"{s.w:g}", s.n_generated, _gold_cell(s, "rouge1"),
                     _gold_cell(s, "rougeL"), _fmt(s.grade and s.grade.mean), _fmt(s.changed_share),
                     _fmt(s.seconds_per_item), str(res.path)))
    table("reward-guided decoding: gold ROUGE F1 [95% CI], rubric grade (0-2)",
          ["rm", "condition", "w", "items", "ROUGE-1", "ROUGE-L", "grade", "picks changed", "s/item", "folder"], rows)
