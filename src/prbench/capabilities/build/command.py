"""`prbench build ...`: construct a benchmark, export a human-validation sample, measure agreement."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import click
import typer

from prbench.build.settings import BuildSettings
from prbench.cli.options import Json, MaxUsd, Prices, Quiet, Seed, engine_options, settings_command
from prbench.cli.output import emit_json, progress, table
from prbench.config import EngineAccess

app = typer.Typer(help="Build a benchmark from LaMP-QA-style items.")

Spec = Annotated[str | None, typer.Option(help="Engine spec, e.g. openai:gpt-5.1, hf:DIR, builtin:smollm2-135m-instruct.")]


@app.callback(invoke_without_command=True)
@settings_command(settings=BuildSettings, access=EngineAccess, exclude=("base_url",))
def build(
    ctx: typer.Context,
    settings: BuildSettings,
    access: EngineAccess,
    source: Annotated[str | None, typer.Option(help="LaMP-QA-style items: file, folder, hub id or 'sample:source'.")] = None,
    generator: Spec = None,
    validator: Spec = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Build folder (dataset, report, run records).")] = None,
    generator_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the generator.")] = None,
    validator_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the validator.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the model-call cache.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Discard an existing build in --out.")] = False,
    push_to_hub: Annotated[str | None, typer.Option(help="Upload the dataset to this Hub repo (token from HF_TOKEN).")] = None,
    max_usd: MaxUsd = None,
    prices: Prices = None,
    batch: Annotated[bool, typer.Option("--batch", help="Generate and validate through provider batches (API engines).")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="With --batch: submit, record and exit (code 4).")] = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Build a benchmark from source items. Generates chosen/rejected answers, validates them on four scales, filters, exports and reports."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [name for name, v in (("--source", source), ("--generator", generator), ("--validator", validator),
                                    ("--out", out)) if not v]
    if missing:
        raise click.UsageError(f"prbench build needs {', '.join(missing)} (or a subcommand: annotate, agreement)")
    from prbench.build import BuildConfig, build_benchmark
    from prbench.store.cache import NullCache

    def engine(spec: str, base_url: str | None) -> dict[str, object]:
        return engine_options(spec, device=access.device, dtype=access.dtype, base_url=base_url,
                              api_key_env=access.api_key_env)

    cfg = BuildConfig.build(settings, source=str(source), generator=str(generator), validator=str(validator),
                            generator_options=engine(str(generator), generator_base_url),
                            validator_options=engine(str(validator), validator_base_url))
    with progress(quiet or json_out) as bar:
        task = bar.add_task("building", total=None)
        res = build_benchmark(cfg, Path(str(out)), cache=NullCache() if no_cache else None, overwrite=overwrite,
                              push_to=push_to_hub, on_progress=lambda d, t: bar.update(task, completed=d, total=t),
                              max_usd=max_usd, prices=prices, batch=batch, wait=not no_wait)
    if json_out:
        emit_json({**res.written, "path": str(res.path)})
        return
    if quiet:
        return
    every = res.report["all"]
    rows: list[tuple[Any, ...]] = [("processed", every["processed"]), ("kept", every["kept"]),
                                   ("dropped", every["dropped"])]
    rows += [(f"  dropped: {k}", v) for k, v in every["dropped_by_reason"].items()]
    rows += [(f"kept in {c}", n) for c, n in res.counts.items()]
    rows += [("dataset", str(res.path / "data")), ("report", str(res.path / "report.md"))]
    if res.summary.pushed_to:
        rows.append(("pushed to", res.summary.pushed_to))
    table(f"build {res.path}", ["", "value"], rows)
    if not res.counts:
        typer.echo("warning: no pair passed the filter; nothing was exported", err=True)


@app.command()
def annotate(
    run_dir: Annotated[Path, typer.Argument(help="A finished build folder.")],
    n: Annotated[int, typer.Option("--n", help="Pairs to sample.")] = 30,
    out: Annotated[Path, typer.Option("--out", "-o", help="File prefix: writes PREFIX.csv, .html and .key.json.")] = Path("annotation"),
    seed: Seed = 0,
    json_out: Json = False,
) -> None:
    """Export pairs for human rating. A blind, seeded sample of kept pairs as a CSV sheet and an offline HTML form."""
    from prbench.build.annotate import export_annotation

    info = export_annotation(run_dir, out, n=n, seed=seed)
    if json_out:
        emit_json(info)
    else:
        typer.echo(f"{info['pairs']} pairs ({info['responses']} answers): fill {info['html']} or {info['csv']}; "
                   f"keep {info['key']} away from annotators")


@app.command()
def agreement(
    filled: Annotated[Path, typer.Argument(help="A filled annotation CSV.")],
    key: Annotated[Path | None, typer.Option(help="Key file (default: <batch>.key.json next to the CSV).")] = None,
    json_out: Json = False,
) -> None:
    """Human vs validator agreement. Spearman, Cohen's kappa on low/mid/high, and the human table."""
    from prbench.build.annotate import agreement as compute
    from prbench.build.annotate import agreement_markdown

    result = compute(filled, key)
    if json_out:
        emit_json(result)
    else:
        typer.echo(agreement_markdown(result))
