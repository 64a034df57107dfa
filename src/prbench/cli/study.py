"""`prbench study` and `prbench demo`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prbench.cli.options import Json, Quiet
from prbench.cli.output import emit_json, table

if TYPE_CHECKING:
    from prbench.cost import PlannedCost
    from prbench.stats.seqsim import Expected
    from prbench.study.config import StudyConfig
    from prbench.study.context import PlannedRun, StudyContext
    from prbench.study.forecast import UntilPlan


def _print_plan(cfg: StudyConfig, root: Path, json_out: bool) -> None:
    from prbench.study.forecast import forecast

    plan = forecast(cfg, root)
    runs, usd, until = plan.runs, plan.usd, plan.until
    columns = plan.columns
    if json_out:
        from prbench.cost import cache_note

        emit_json([{**r.__dict__, "usd_sync": u and round(u.sync, 2), "usd_batch": u and round(u.batch, 2),
                    "usd_batch_cache": u and round(u.batch_cache, 2), "cache": u and cache_note([u]),
                    **({"usd_until_decided": u and round(columns[-1][1](r, u), 2)} if until else {})}
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
    head, rows = plan.dollar_rows()
    if rows:
        table("API dollars (list prices)", head, rows)
        _print_assumptions(runs, usd, until, plan.both_orders)
    if cfg.hardware:
        typer.echo(f"hardware: {cfg.hardware}")
    for k, v in cfg.estimates.items():
        typer.echo(f"{k}: {v}")


def _print_assumptions(runs: list[PlannedRun], usd: list[PlannedCost | None], until: UntilPlan | None,
                       swapped: tuple[float, float | None] | None) -> None:
    """Every assumption behind the dollars: replies, cache hits and minimums, the simulation behind the
    expected dollars under `--until decided`, and what both orders would cost."""
    from prbench.cost import CACHE_HITS, REPLY_TOKENS, cache_note

    by_spec: dict[str, list[PlannedCost]] = {}
    for r, u in zip(runs, usd):
        if u and r.spec:
            by_spec.setdefault(r.spec, []).append(u)
    typer.echo(f"assumed: {REPLY_TOKENS} output tokens per call (thinking not included); $ sync and $ batch count "
               f"no cache hits; for $ batch+cache, of the calls that share a start with an earlier one, "
               f"{CACHE_HITS['batch']:.0%} find it cached in a batch (no provider publishes a batch hit rate), and a "
               f"start under the provider's minimum cacheable prefix is counted uncached:")
    for spec, costs in by_spec.items():
        typer.echo(f"  {spec}: {cache_note(costs)}")
    if not any(u.reason == "cached" for u in usd if u):
        typer.echo("  so no call is counted cached here and $ batch+cache equals $ batch (the reasons above; the "
                   "minimums are in the price tables in prbench/prices)")
    if until is not None:
        _print_until(until)
    if swapped is not None:
        total, decided = swapped
        typer.echo(f"both orders: with `both_orders: true` on the pairwise judges every item is judged twice, the "
                   f"answers swapped: $ batch+cache {total:,.2f} in all"
                   + ("" if decided is None else f", and about {decided:,.2f} under `until: decided` (the same "
                                                 f"shares, an item's two verdicts counted as one: an upper bound)"))


def _print_until(until: UntilPlan) -> None:
    from prbench.study.forecast import UNTIL_COLUMN

    sh, ex = until.expected.shape, until.expected
    by_judge = ""
    if until.ranks and ex.run_shares:
        per = [(spec, sum(ex.share(c, rank) for c in range(sh.conditions)) / sh.conditions)
               for spec, rank in until.ranks.items()]
        by_judge = " (by judge, mean over conditions: " + ", ".join(f"{s} {x:.3f}" for s, x in per) + ")"
    typer.echo(
        f"{UNTIL_COLUMN}: each eval run's $ batch+cache x its expected share of the items under `until: decided`, "
        f"mean {ex.fraction:.3f}{by_judge}, from {ex.studies:,} simulated studies of this shape ({ex.source}): "
        f"{sh.models} API judges x {sh.conditions} conditions on {sh.items:,} items from {sh.users:,} users, judge "
        f"accuracies {' / '.join(f'{a:.3f}' for a in sh.judges)} ({ex.note}) shifted per condition by "
        f"{' / '.join(f'{x:+.2f}' for x in sh.shifts)}, {sh.item_share:.0%} of an item's difficulty shared by all "
        f"judges; a judge retired once separated from every other or within +-{sh.margin:g}"
        + (f"; the models without API calls scored on every item first, so {sh.family} sequences share the 5% "
           f"(assumed: no judge within {sh.margin:g} of such a model)" if sh.family else "")
        + "; each look after 10% more items is one round of batches; the other stages in full" + _other_note(ex))


def _other_note(until: Expected) -> str:
    """The saving is the judges', not the tool's: the share under the other judge spacing, when simulated."""
    from prbench.stats.seqsim import StudyShape, shipped_share

    default = StudyShape().judges
    other = replace(until.shape, judges=default if until.shape.judges != default else (0.677, 0.705, 0.746))
    found = shipped_share(other)
    return "" if found is None else (
        f". The saving is the judges': with judges at {' / '.join(f'{a:.3f}' for a in other.judges)} `decided` "
        f"would spend {found.fraction:.3f} of the calls ({found.studies:,} studies; benchmarks/RESULTS_sequential.md)")


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
    from prbench.runtime.progress import announce
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
    if json_out:
        emit_json({"out": str(ctx.out), **ctx.outputs.dump()})
        return
    if quiet:
        return
    from prbench.cli.leaderboard import show_leaderboard
    from prbench.leaderboard import leaderboard

    if ctx.runs.exists():
        typer.echo(f"leaderboard: {ctx.cfg.name}")
        show_leaderboard(leaderboard(ctx.runs))
    if ctx.outputs.report is not None:
        typer.echo(f"report: {ctx.outputs.report}")
    typer.echo(f"study folder: {ctx.out}  (stage seconds: {ctx.outputs.timings})")


def demo_cmd(
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output folder (default prbench-demo, or prbench-demo-full with --full).")] = None,
    full: Annotated[bool, typer.Option(
        "--full", help="The whole demo study (preset demo-full): planner and oracle too, every baseline, more "
                       "samples; several times longer.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the plan (runs, calls, tokens) and stop.")] = False,
    quiet: Quiet = False,
) -> None:
    """Run the built-in demo study. The `demo` preset on the sample with the built-in models (CPU, offline)."""
    preset = "demo-full" if full else "demo"
    study_cmd(None, preset=preset, list_=False, dry_run=dry_run, out=out, batch=False, quiet=quiet, json_out=False)
