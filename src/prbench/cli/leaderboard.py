"""`prbench leaderboard` and `prbench compare`: the readers of eval runs (written by `prbench eval`,
`prbench.capabilities.eval.command`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prbench.cli.options import Json, Quiet, Seed
from prbench.cli.output import emit_json, table

if TYPE_CHECKING:
    from prbench.leaderboard import Row


def leaderboard_cmd(
    runs: Annotated[Path, typer.Argument(help="Runs folder.")] = Path("runs"),
    categories: Annotated[bool, typer.Option("--by-category", help="Also show accuracy per category.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (p-values, resolvable differences), as wide as "
                                                      "it takes; by default the table fits 120 columns.")] = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Accuracy of every run, one table per data set.

    One row per model x condition x the settings that differ, baselines included, under a headline (does an
    RM use the person; the best model whose checks hold). CSV and JSON beside the runs."""
    from prbench.leaderboard import headlines, leaderboard, write_leaderboard

    rows = leaderboard(runs)
    csv_path, json_path = write_leaderboard(rows, runs)
    if json_out:
        emit_json({"rows": [r.model_dump() for r in rows], "headlines": [h.lines() for h in headlines(rows)],
                   "csv": str(csv_path), "json": str(json_path)})
        return
    if not quiet:
        show_leaderboard(rows, categories, wide)
        typer.echo(f"wrote {csv_path} and {json_path}")


def show_leaderboard(rows: list[Row], categories: bool = False, wide: bool = False,
                     title: str | None = None) -> None:
    """The leaderboard's tables, each under its data set's headline (`prbench leaderboard`, a study's end)."""
    import shutil
    import textwrap

    from prbench.leaderboard import LEGEND, headlines, render_tables

    width = min(120, shutil.get_terminal_size((220, 24)).columns)  # COLUMNS when set
    said = {h.data: h.lines() for h in headlines(rows)}
    for name, head, body in render_tables(rows, categories, wide):
        data = name.removesuffix(": accuracy % [95% CI]")
        for line in said.pop(data, []):  # above its data set's first table
            typer.echo(line if wide else textwrap.fill(line, width, subsequent_indent="  "))
        table(title or name, head, body, keep_first=True,  # names break only where wrap_name put lines
              max_width=None if wide else 120)
    typer.echo(LEGEND if wide else textwrap.fill(LEGEND, width))


def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="First run folder.")],
    run_b: Annotated[Path, typer.Argument(help="Second run folder.")],
    seed: Seed = 0,
    json_out: Json = False,
) -> None:
    """Paired difference in accuracy of two runs. A - B with a paired bootstrap CI and an exact McNemar p-value."""
    from prbench.leaderboard import compare_runs

    res = compare_runs(run_a, run_b, seed=seed)
    if json_out:
        emit_json(res.model_dump())
        return
    table("paired comparison (A - B)", ["A", "B", "n", "diff", "95% CI", "McNemar p"],
          [(f"{res.a.model} [{res.a.condition}]", f"{res.b.model} [{res.b.condition}]",
            res.n_shared, f"{100 * res.diff:+.1f}",
            f"[{100 * res.ci_low:+.1f}, {100 * res.ci_high:+.1f}]", f"{res.mcnemar_p:.3g}")])
