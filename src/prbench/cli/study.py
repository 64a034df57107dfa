"""`prbench study` and `prbench demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli import app
from prbench.cli.options import Json, Quiet
from prbench.cli.output import emit_json, table


def _print_plan(cfg, root: Path, json_out: bool) -> None:
    from prbench.cost import REPLY_TOKENS, planned_dollars
    from prbench.engines.providers import engine_provider
    from prbench.study.runner import plan_study

    runs = plan_study(cfg, root)
    options = {m.spec: m.options for m in cfg.models} | ({cfg.planner.spec: cfg.planner.options} if cfg.planner else {})
    usd = [planned_dollars(engine_provider(r.spec, options.get(r.spec)) if r.spec else None, r.model_calls, r.tokens)
           for r in runs]
    if json_out:
        emit_json([{**r.__dict__, "usd_sync": u and round(u[0], 2), "usd_batch": u and round(u[1], 2)}
                   for r, u in zip(runs, usd)])
        return
    table(f"plan of study {cfg.name!r}", ["stage", "run", "model calls", "tokens (est.)", "$ sync", "$ batch"],
          [(r.stage, r.what, f"{r.model_calls:,}", f"{r.tokens:,}", *((f"{u[0]:,.2f}", f"{u[1]:,.2f}") if u else
                                                                      ("-", "-"))) for r, u in zip(runs, usd)])
    total_calls = sum(r.model_calls for r in runs)
    total_tokens = sum(r.tokens for r in runs)
    typer.echo(f"{len(runs)} runs, about {total_calls:,} model calls and {total_tokens:,} tokens")
    by_stage: dict[str, list[float]] = {}
    for r, u in zip(runs, usd):
        if u:
            by_stage.setdefault(r.stage, [0.0, 0.0])
            by_stage[r.stage] = [by_stage[r.stage][0] + u[0], by_stage[r.stage][1] + u[1]]
    for stage_name, (sync, batched) in by_stage.items():
        typer.echo(f"API dollars, {stage_name}: ${sync:,.2f} synchronous, ${batched:,.2f} with --batch "
                   f"(list prices; {REPLY_TOKENS} output tokens per call assumed)")
    if cfg.hardware:
        typer.echo(f"hardware: {cfg.hardware}")
    for k, v in cfg.estimates.items():
        typer.echo(f"{k}: {v}")


@app.command("study")
def study_cmd(
    config: Annotated[Path | None, typer.Argument(help="Study YAML file.")] = None,
    preset: Annotated[str | None, typer.Option(help="Run a shipped preset instead of a file.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the shipped presets.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the plan (runs, calls, tokens) and stop.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Override the study's output folder.")] = None,
    batch: Annotated[bool, typer.Option(
        "--batch", help="Eval stage: send every API model's requests as provider batches (half price).")] = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Run a whole study from one config file. Eval, planner, downstream, meta and report; resumable."""
    from prbench.progress import announce
    from prbench.study.config import list_presets, load_study_config
    from prbench.study.runner import run_study

    if list_:
        presets = list_presets()
        if json_out:
            emit_json(presets)
        else:
            table("presets", ["name", "description"], sorted(presets.items()))
        return
    cfg, root = load_study_config(config, preset)
    if out is not None:
        cfg = cfg.model_copy(update={"out": str(out.resolve())})
    if batch:
        from prbench.engines.providers import engine_provider

        cfg = cfg.model_copy(update={"models": [m.model_copy(update={"batch": True}) if engine_provider(m.spec) else m
                                                for m in cfg.models]})
    if dry_run:
        _print_plan(cfg, root, json_out)
        return
    if cfg.estimates.get("duration") and not (quiet or json_out):  # before the first minute of work
        announce(f"study {cfg.name}: {len(cfg.stages)} stages, expect {cfg.estimates['duration']}")
    ctx = run_study(cfg, root, quiet=quiet or json_out)
    _finish(ctx, quiet, json_out)


def _finish(ctx, quiet: bool, json_out: bool) -> None:
    outputs = {k: v for k, v in ctx.outputs.items()}
    if json_out:
        emit_json({"out": str(ctx.out), **outputs})
        return
    if quiet:
        return
    from prbench.leaderboard import leaderboard, render_rows

    if ctx.runs.exists():
        head, body = render_rows(leaderboard(ctx.runs))
        table(f"leaderboard: {ctx.cfg.name} (accuracy % [95% CI], ties 0.5)", head, body)
    if "report" in ctx.outputs:
        typer.echo(f"report: {ctx.outputs['report']}")
    typer.echo(f"study folder: {ctx.out}  (stage seconds: {ctx.outputs.get('timings')})")


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("prbench-demo"),
    quiet: Quiet = False,
) -> None:
    """Run the built-in demo study. The `demo` preset on the sample with the built-in models (CPU, offline)."""
    study_cmd(None, preset="demo", list_=False, dry_run=False, out=out, batch=False, quiet=quiet, json_out=False)
