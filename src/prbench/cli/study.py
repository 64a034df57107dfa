"""`prbench study` and `prbench demo`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prbench.cli.options import Json, Quiet
from prbench.cli.output import emit_json, table

if TYPE_CHECKING:
    from prbench.cost import PlannedCost
    from prbench.seqsim import Expected
    from prbench.study.config import StudyConfig
    from prbench.study.context import PlannedRun, StudyContext


def _print_plan(cfg: StudyConfig, root: Path, json_out: bool) -> None:
    from prbench.cost import planned_dollars
    from prbench.engines.providers import caches_prompts, engine_provider
    from prbench.study.runner import plan_study

    runs = plan_study(cfg, root)
    options = {m.spec: m.options for m in cfg.models} | ({cfg.planner.spec: cfg.planner.options} if cfg.planner else {})
    usd = [planned_dollars(engine_provider(r.spec, options.get(r.spec)) if r.spec else None, r.model_calls, r.tokens,
                           prefix_tokens=r.prefix_tokens, calls_per_prefix=r.calls_per_prefix,
                           caches=r.spec is not None and caches_prompts(r.spec, options.get(r.spec))) for r in runs]
    until = expected_until(cfg, runs, usd)
    columns = DOLLARS + ([(UNTIL_COLUMN, lambda r, u: u.batch_cache * (until.fraction if r.stage == "eval" else 1))]
                         if until else [])
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
    head, rows = dollar_rows(runs, usd, columns)
    if rows:
        table("API dollars (list prices)", head, rows)
        _print_assumptions(runs, usd, until)
    if cfg.hardware:
        typer.echo(f"hardware: {cfg.hardware}")
    for k, v in cfg.estimates.items():
        typer.echo(f"{k}: {v}")


def _print_assumptions(runs: list[PlannedRun], usd: list[PlannedCost | None], until: Expected | None) -> None:
    """Every assumption behind the dollars: replies, cache hits and minimums, and the simulation behind the
    expected dollars under `--until decided`."""
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
        typer.echo("  so no call is counted cached here and $ batch+cache equals $ batch: every shared start is "
                   "under its provider's minimum cacheable prefix (from the price tables in prbench/prices) or on a "
                   "route without prompt caching")
    if until is None:
        return
    sh = until.shape
    typer.echo(
        f"{UNTIL_COLUMN}: the eval stage's $ batch+cache x {until.fraction:.3f}, the mean share of judge calls "
        f"`until: decided` spent in {until.studies:,} simulated studies of this shape ({until.source}): "
        f"{sh.models} API judges x {sh.conditions} conditions on {sh.items:,} items from {sh.users:,} users, judge "
        f"accuracies {' / '.join(f'{a:.3f}' for a in sh.judges)} ({until.note}) shifted per condition by "
        f"{' / '.join(f'{x:+.2f}' for x in sh.shifts)}, {sh.item_share:.0%} of an item's difficulty shared by all "
        f"judges; a judge retired once separated from every other or within +-{sh.margin:g}"
        + (f"; the models without API calls scored on every item first, so {sh.family} sequences share the 5% "
           f"(assumed: no judge within {sh.margin:g} of such a model)" if sh.family else "")
        + "; each look after 10% more items is one round of batches; the other stages in full" + _other_note(until))


def _other_note(until: Expected) -> str:
    """The saving is the judges', not the tool's: the share under the other judge spacing, when simulated."""
    from prbench.seqsim import StudyShape, shipped_share

    default = StudyShape().judges
    other = replace(until.shape, judges=default if until.shape.judges != default else (0.677, 0.705, 0.746))
    found = shipped_share(other)
    return "" if found is None else (
        f". The saving is the judges': with judges at {' / '.join(f'{a:.3f}' for a in other.judges)} `decided` "
        f"would spend {found.fraction:.3f} of the calls ({found.studies:,} studies; benchmarks/RESULTS_sequential.md)")


UNTIL_COLUMN = "$ until decided (expected)"


def expected_until(cfg: StudyConfig, runs: list[PlannedRun], usd: list[PlannedCost | None]) -> Expected | None:
    """What `until: decided` is expected to spend on the eval stage (`prbench.seqsim`), when it has two or more
    API judges to rank; None otherwise. The judges' accuracies: their published ones under `none` (the mean over
    categories) when every API judge has one, else the default shape's spacing."""
    from prbench.engines.providers import engine_provider
    from prbench.seqsim import expected_share, study_shape

    if "eval" not in cfg.stages:
        return None
    api = [m for m in cfg.models if engine_provider(m.spec, m.options)]
    paid = [r for r, u in zip(runs, usd) if r.stage == "eval" and u is not None]
    if len(api) < 2 or not paid:
        return None
    items = max(r.model_calls // max(r.calls_per_prefix, 1) for r in paid)
    published = [list(((m.published or {}).get("none") or {}).values()) for m in api]
    accuracies = tuple(sum(p) / len(p) / 100 for p in published) if all(published) else None
    shape = study_shape(items, len(api), len(cfg.conditions), len(cfg.models) - len(api), accuracies)
    note = ("the judges' published accuracies under none, mean over categories" if accuracies else
            "no published accuracy for every judge: the default shape's spacing")
    return replace(expected_share(shape), note=note)


def dollar_rows(runs: list[PlannedRun], usd: list[PlannedCost | None],
                columns: list[tuple[str, Callable[[PlannedRun, PlannedCost], float]]] | None = None
                ) -> tuple[list[str], list[tuple[str, ...]]]:
    """The dry run's closing table: per stage with API calls, then all. Its columns are `DOLLARS` (or `columns`:
    the dry run adds the expected dollars under `until: decided`)."""
    columns = columns or DOLLARS
    by_stage: dict[str, list[float]] = {}
    for r, u in zip(runs, usd):
        if u:
            acc = by_stage.setdefault(r.stage, [0.0] * (2 + len(columns)))
            acc[0] += r.model_calls
            acc[1] += r.tokens
            for n, (_, of) in enumerate(columns, 2):
                acc[n] += of(r, u)
    if not by_stage:
        return [], []
    total = [sum(col) for col in zip(*by_stage.values())]
    rows = [(name, f"{v[0]:,.0f}", f"{v[1] / 1e6:,.1f} M", *(f"{x:,.2f}" for x in v[2:]))
            for name, v in [*by_stage.items(), ("all", total)]]
    return ["stage", "calls", "input tokens", *(name for name, _ in columns)], rows


DOLLARS: list[tuple[str, Callable[[PlannedRun, PlannedCost], float]]] = [
    ("$ sync", lambda r, u: u.sync), ("$ batch", lambda r, u: u.batch), ("$ batch+cache", lambda r, u: u.batch_cache)]


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


def demo_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("prbench-demo"),
    quiet: Quiet = False,
) -> None:
    """Run the built-in demo study. The `demo` preset on the sample with the built-in models (CPU, offline)."""
    study_cmd(None, preset="demo", list_=False, dry_run=False, out=out, batch=False, quiet=quiet, json_out=False)
