"""`prbench bon`: Best-of-N curves per RM on a samples folder, shown as a table (or JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prbench.capabilities.bon.driver import best_of_n
from prbench.capabilities.bon.settings import BonSettings
from prbench.cli.options import (
    Json,
    MaxLength,
    MaxUsd,
    Prices,
    Quiet,
    grader_engine_options,
    set_options,
    settings_command,
)
from prbench.cli.output import emit_json, escape, progress, table
from prbench.config import EngineAccess, GraderAccess


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


@settings_command(settings=BonSettings, access=EngineAccess, grader_access=GraderAccess)
def bon(
    samples: Annotated[Path, typer.Option("--samples", "-s", help="Folder written by `prbench sample`.")],
    rm: Annotated[list[str], typer.Option("--rm", "-m", help="RM spec (repeatable).")],
    grader: Annotated[str, typer.Option("--grader", "-g", help="Grader: openai:MODEL, hf:DIR, builtin:NAME or embedding:ENCODER.")],
    settings: BonSettings,
    access: EngineAccess,
    grader_access: GraderAccess,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results folder (default SAMPLES/bon/CONDITION).")] = None,
    max_length: MaxLength = None,
    mode: Annotated[str | None, typer.Option(help="Judges: must be pointwise for Best-of-N.")] = None,
    grader_narrative: Annotated[bool, typer.Option(help="Also show the grader the user's narrative.")] = False,
    grader_prompt_file: Annotated[str | None, typer.Option(help="Your own grading prompt.")] = None,
    grader_max_new_tokens: Annotated[int, typer.Option(help="Token cap of each grading reply.")] = 512,
    max_usd: MaxUsd = None,
    prices: Prices = None,
    batch: Annotated[bool, typer.Option("--batch", help="Grade through provider batches (API graders; half price).")] = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Best-of-N curves per RM on a samples folder. First-k pick, exact expected best-of-k, oracle and random."""
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache

    out = out or samples / "bon" / settings.condition
    g = load_grader(grader, cache=Cache(namespace="grades"), show_narrative=grader_narrative,
                    prompt_path=grader_prompt_file, max_new_tokens=grader_max_new_tokens,
                    engine_options=grader_engine_options(grader, access, grader_access))
    with progress(quiet or json_out) as bar:  # off a terminal, a line at least every interval while it grades
        task = bar.add_task("bon", total=None)
        res = best_of_n(samples, rm, g, settings=settings, out=out,
                        rm_options=set_options(mode=mode, max_length=max_length, **access.model_dump()),
                        on_progress=lambda msg: bar.update(task, description=f"bon: {escape(msg)}"),
                        max_usd=max_usd, prices=prices, batch=batch)
    if json_out:
        emit_json({**res.written, "path": str(res.path)})
        return
    if quiet:
        return
    s = res.summary
    rows: list[tuple[Any, ...]] = []
    for r in s.rms:
        if r.error:
            rows.append((r.rm, "error", r.error, *[""] * len(s.k)))
            continue
        rows.append((r.rm, "expected", r.n_items,
                     *[f"{_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]" for v, lo, hi in zip(r.expected, r.ci_low, r.ci_high)]))
        rows.append(("", "first-k", "", *[_fmt(v) for v in r.first_k]))
    rows.append(("<oracle>", "expected", s.n_gradable_items, *[_fmt(v) for v in s.oracle.mean]))
    rows.append(("<random>", "expected", s.n_gradable_items, *[_fmt(v) for v in s.random.mean]))
    table(f"Best-of-N: mean rubric grade (0-2) [95% CI], condition {settings.condition}",
          ["rm", "curve", "items", *[f"k={x}" for x in s.k]], rows)
    calls = s.grader_calls
    typer.echo(f"grader calls: {calls.made} made vs {calls.naive} naive ({calls.naive_rule}); "
               f"{s.grader.cache_hits} cache hits; results in {res.path}")
