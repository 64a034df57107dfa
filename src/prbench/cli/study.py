"""`prbench study` and `prbench demo`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prbench.cli import app
from prbench.cli.options import Json, Quiet
from prbench.cli.output import emit_json, table

if TYPE_CHECKING:
    from prbench.cost import PlannedCost
    from prbench.study.config import StudyConfig
    from prbench.study.context import PlannedRun, StudyContext


def _print_plan(cfg: StudyConfig, root: Path, json_out: bool) -> None:
    from prbench.cost import CACHE_HITS, REPLY_TOKENS, cache_note, planned_dollars
    from prbench.engines.providers import caches_prompts, engine_provider
    from prbench.study.runner import plan_study

    runs = plan_study(cfg, root)
    options = {m.spec: m.options for m in cfg.models} | ({cfg.planner.spec: cfg.planner.options} if cfg.planner else {})
    usd = [planned_dollars(engine_provider(r.spec, options.get(r.spec)) if r.spec else None, r.model_calls, r.tokens,
                           prefix_tokens=r.prefix_tokens, calls_per_prefix=r.calls_per_prefix,
                           caches=r.spec is not None and caches_prompts(r.spec, options.get(r.spec))) for r in runs]
    if json_out:
        emit_json([{**r.__dict__, "usd_sync": u and round(u.sync, 2), "usd_batch": u and round(u.batch, 2),
                    "usd_batch_cache": u and round(u.batch_cache, 2), "cache": u and cache_note([u])}
                   for r, u in zip(runs, usd)])
        return
    money = ("-", "-", "-")
    table(f"plan of study {cfg.name!r}", ["stage", "run", "model calls", "tokens (est.)", "$ sync", "$ batch",
                                          "$ batch+cache"],
          [(r.stage, r.what, f"{r.model_calls:,}", f"{r.tokens:,}",
            *((f"{u.sync:,.2f}", f"{u.batch:,.2f}", f"{u.batch_cache:,.2f}") if u else money))
           for r, u in zip(runs, usd)])
    typer.echo(f"{len(runs)} runs, about {sum(r.model_calls for r in runs):,} model calls and "
               f"{sum(r.tokens for r in runs):,} tokens")
    head, rows = dollar_rows(runs, usd)
    if rows:
        table("API dollars (list prices)", head, rows)
        by_spec: dict[str, list[PlannedCost]] = {}
        for r, u in zip(runs, usd):
            if u and r.spec:
                by_spec.setdefault(r.spec, []).append(u)
        typer.echo(f"assumed: {REPLY_TOKENS} output tokens per call (thinking not included); of the calls that "
                   f"share a start with an earlier one, {CACHE_HITS['batch']:.0%} find it cached in a batch; a start "
                   f"under the provider's minimum cacheable prefix is counted uncached:")
        for spec, costs in by_spec.items():
            typer.echo(f"  {spec}: {cache_note(costs)}")
    if cfg.hardware:
        typer.echo(f"hardware: {cfg.hardware}")
    for k, v in cfg.estimates.items():
        typer.echo(f"{k}: {v}")


def dollar_rows(runs: list[PlannedRun], usd: list[PlannedCost | None]) -> tuple[list[str], list[tuple[str, ...]]]:
    """The dry run's closing table: per stage with API calls, then all. Its columns are `DOLLARS`; a further
    estimate (say, expected dollars under `--until decided`) is one more entry there."""
    by_stage: dict[str, list[float]] = {}
    for r, u in zip(runs, usd):
        if u:
            acc = by_stage.setdefault(r.stage, [0.0] * (2 + len(DOLLARS)))
            acc[0] += r.model_calls
            acc[1] += r.tokens
            for n, (_, of) in enumerate(DOLLARS, 2):
                acc[n] += of(u)
    if not by_stage:
        return [], []
    total = [sum(col) for col in zip(*by_stage.values())]
    rows = [(name, f"{v[0]:,.0f}", f"{v[1] / 1e6:,.1f} M", *(f"{x:,.2f}" for x in v[2:]))
            for name, v in [*by_stage.items(), ("all", total)]]
    return ["stage", "calls", "input tokens", *(name for name, _ in DOLLARS)], rows


DOLLARS: list[tuple[str, Callable[[PlannedCost], float]]] = [
    ("$ sync", lambda u: u.sync), ("$ batch", lambda u: u.batch), ("$ batch+cache", lambda u: u.batch_cache)]


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


def _finish(ctx: StudyContext, quiet: bool, json_out: bool) -> None:
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
