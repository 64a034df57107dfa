"""`prbench policy-accuracy`: does the reward-guided policy give the chosen answer the higher likelihood?"""

from __future__ import annotations

from typing import Annotated

import typer

from prbench.capabilities.policy_accuracy.driver import policy_accuracy as run_pa
from prbench.capabilities.policy_accuracy.settings import PolicyAccuracySettings
from prbench.cli.options import Data, Json, MaxLength, ModelOptions, Overwrite, Quiet, settings_command
from prbench.cli.output import emit_json, table
from prbench.cli.rgd import OutDir, Policy, RMs, Ws, _fmt, _sweep
from prbench.config import EngineAccess


@settings_command(settings=PolicyAccuracySettings, access=EngineAccess, exclude=("w",))
def policy_accuracy(
    policy: Policy,
    rm: RMs,
    out: OutDir,
    settings: PolicyAccuracySettings,
    access: EngineAccess,
    data: Data = "sample",
    w: Ws = "1.0",
    max_length: MaxLength = None,
    judge_mode: Annotated[str | None, typer.Option(
        "--judge-mode", help="Judges: must be pointwise (the same as -M mode=pointwise; --mode is the policy's).")] = None,
    model_option: ModelOptions = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Policy accuracy of a reward-guided policy. Does it give chosen a higher likelihood than rejected?"""
    results = _sweep(policy, rm, w, settings, access, quiet or json_out, lambda engine, rm_obj, wv, on_progress: run_pa(
        engine, rm_obj, data, out, settings=settings, w=wv, overwrite=overwrite, on_progress=on_progress),
        mode=judge_mode, max_length=max_length, model_option=model_option)
    if json_out:
        emit_json([{**res.written, "path": str(res.path)} for res in results])
        return
    if quiet:
        return
    rows = []
    for res in results:
        s = res.summary
        m = s.metrics
        pa = m.policy_accuracy.total
        ci = f"[{_fmt(pa.ci_low, True)}, {_fmt(pa.ci_high, True)}]"
        rows.append((s.rm, s.condition, f"{s.w:g}", s.mode, m.n, _fmt(s.policy_accuracy, True), ci,
                     _fmt(s.policy_accuracy_normalized, True), _fmt(s.plain_policy_accuracy, True),
                     _fmt(s.plain_policy_accuracy_normalized, True), _fmt(m.rm_accuracy.accuracy, True),
                     str(res.path)))
    table("policy accuracy (%) on pairs, ties 0.5",
          ["rm", "condition", "w", "mode", "n", "guided", "95% CI", "guided/token", "plain", "plain/token", "RM",
           "folder"], rows)
