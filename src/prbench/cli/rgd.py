"""`prbench rgd`, `prbench policy-accuracy`, `prbench icl`: paper B's side of downstream validation.

Plain functions: `prbench.cli.COMMANDS` and the run kinds' `command` name them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prbench.cli.options import (
    Data,
    Json,
    MaxLength,
    ModelOptions,
    Overwrite,
    Quiet,
    engine_options,
    grader_engine_options,
    model_options,
    settings_command,
    split_csv,
)
from prbench.cli.output import emit_json, progress, table
from prbench.config import EngineAccess, GraderAccess, PolicyAccuracySettings, RGDSettings

if TYPE_CHECKING:
    from rich.progress import TaskID

Policy = Annotated[str, typer.Option("--policy", "-p", help="Policy: hf:DIR, hf:HUB_ID or builtin:smollm2-135m-instruct.")]
RMs = Annotated[list[str], typer.Option("--rm", "-m", help="Pointwise RM spec (repeatable): baseline:embedding, hf:DIR, pmi:ENGINE ...")]
Ws = Annotated[str, typer.Option("--w", help="Reward weight(s), comma-separated (e.g. 0,0.5,1); 0 = the plain policy.")]
Grader = Annotated[str | None, typer.Option("--grader", "-g", help="Rubric grader: openai:MODEL, hf:DIR, builtin:NAME or embedding:ENCODER.")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Results root (one sub-folder per setting).")]


def _floats(value: str) -> list[float]:
    try:
        vals = [float(v) for v in (split_csv(value) or [])]
    except ValueError:
        raise typer.BadParameter(f"--w must be numbers separated by commas, got {value!r}") from None
    if not vals:
        raise typer.BadParameter("--w needs at least one value")
    return vals


def _sweep(policy: str, specs: list[str], w: str, settings: Any, access: EngineAccess, quiet: bool,
           run_one: Callable[[Any, Any, float, Callable[[int, int], None]], Any], **rm_flags: Any) -> list[dict[str, Any]]:
    """Run `run_one(policy engine, rm, w, on_progress)` for every RM x weight (the policy and each RM loaded once);
    summaries with paths. `rm_flags`: the command's RM flags and `-M` pairs (`model_option`)."""
    from prbench.downstream.rgd import load_policy
    from prbench.rewards.base import load_rm

    ws = _floats(w)
    engine = load_policy(policy, engine_options(policy, **access.model_dump(), batch_size=settings.batch_size))
    rm_options = model_options(specs, rm_flags.pop("model_option"), batch_size=settings.rm_batch_size,
                               **rm_flags, **access.model_dump())
    summaries = []
    with progress(quiet) as bar:
        for spec in specs:
            rm_obj = load_rm(spec, **{"seed": settings.seed, **rm_options[spec]})
            for wv in ws:
                task = bar.add_task(f"{spec} w={wv:g}", total=None)

                def on_progress(done: int, total: int, task: TaskID = task) -> None:
                    bar.update(task, completed=done, total=total)

                res = run_one(engine, rm_obj, wv, on_progress)
                summaries.append({**res.summary, "path": str(res.path)})
    return summaries


def _grader(spec: str | None, access: EngineAccess, grader_access: GraderAccess) -> Any:
    if not spec:
        return None
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache

    return load_grader(spec, cache=Cache(namespace="grades"),
                       engine_options=grader_engine_options(spec, access, grader_access))


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.3f}"


def _gold_cell(summary: dict[str, Any], metric: str = "rouge1") -> str:
    gold = summary.get("gold") or {}
    m = (gold.get("metrics") or {}).get(metric)
    if not m or m.get("mean") is None:
        return "-"
    return f"{m['mean']:.3f} [{_fmt(m['ci_low'])}, {_fmt(m['ci_high'])}]"


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
    from prbench.downstream.rgd import run_rgd

    g = _grader(grader, access, grader_access)
    summaries = _sweep(policy, rm, w, settings, access, quiet or json_out, lambda engine, rm_obj, wv, on_progress: run_rgd(
        engine, rm_obj, data, out, settings=settings, w=wv, grader=g, overwrite=overwrite, on_progress=on_progress),
        mode=mode, max_length=max_length, model_option=model_option)
    if json_out:
        emit_json(summaries)
        return
    if quiet:
        return
    rows = []
    for s in summaries:
        grade = s.get("grade") or {}
        rows.append((s["rm"], s["condition"], f"{s['w']:g}", s["n_generated"], _gold_cell(s, "rouge1"),
                     _gold_cell(s, "rougeL"), _fmt(grade.get("mean")), _fmt(s.get("changed_share")),
                     _fmt(s.get("seconds_per_item")), s["path"]))
    table("reward-guided decoding: gold ROUGE F1 [95% CI], rubric grade (0-2)",
          ["rm", "condition", "w", "items", "ROUGE-1", "ROUGE-L", "grade", "picks changed", "s/item", "folder"], rows)


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
    from prbench.downstream.policy_accuracy import policy_accuracy as run_pa

    summaries = _sweep(policy, rm, w, settings, access, quiet or json_out, lambda engine, rm_obj, wv, on_progress: run_pa(
        engine, rm_obj, data, out, settings=settings, w=wv, overwrite=overwrite, on_progress=on_progress),
        mode=judge_mode, max_length=max_length, model_option=model_option)
    if json_out:
        emit_json(summaries)
        return
    if quiet:
        return
    rows = []
    for s in summaries:
        m = s["metrics"]
        pa = m["policy_accuracy"]["total"] or {}
        ci = f"[{_fmt(pa.get('ci_low'), True)}, {_fmt(pa.get('ci_high'), True)}]"
        rows.append((s["rm"], s["condition"], f"{s['w']:g}", s["mode"], m["n"], _fmt(s["policy_accuracy"], True), ci,
                     _fmt(s["policy_accuracy_normalized"], True), _fmt(s["plain_policy_accuracy"], True),
                     _fmt(s["plain_policy_accuracy_normalized"], True), _fmt((m.get("rm_accuracy") or {}).get("accuracy"), True),
                     s["path"]))
    table("policy accuracy (%) on pairs, ties 0.5",
          ["rm", "condition", "w", "mode", "n", "guided", "95% CI", "guided/token", "plain", "plain/token", "RM",
           "folder"], rows)
