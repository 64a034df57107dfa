"""`prbench meta` (rank agreement of benchmark and downstream) and `prbench report` (one HTML file).

Plain functions: `prbench.cli.COMMANDS` and the run kinds' `command` name them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import (
    DownstreamPaths,
    Json,
    MetaSummary,
    NBoot,
    NdcgK,
    NPerm,
    Out,
    PublishedFile,
    Quiet,
    RboP,
    ReportTitle,
    RunsRoots,
    Seed,
    split_csv,
)
from prbench.cli.output import emit_json, progress, table
from prbench.errors import PrbenchError


def meta(
    runs: RunsRoots,
    downstream: DownstreamPaths,
    out: Out = Path("meta"),
    summary: MetaSummary = "mean",
    seed: Seed = 0,
    n_boot: NBoot = 1000,
    n_perm: NPerm = 1000,
    rbo_p: RboP = 0.9,
    ndcg_k: NdcgK = None,
    condition: Annotated[str | None, typer.Option("--condition", "-c", help="Only benchmarks of these conditions (comma-separated).")] = None,
    match_condition: Annotated[bool, typer.Option(help="Pair a benchmark condition only with downstream runs of the same condition.")] = False,
    pairing: Annotated[str, typer.Option(help="auto (joint when both sides share items), joint or independent.")] = "auto",
    bon_curve: Annotated[str, typer.Option(help="BoN value: expected (exact, no draw noise) or first_k (the paper's draw).")] = "expected",
    bon_k: Annotated[str, typer.Option(help="BoN rows: all (every k) or max (largest k only, faster).")] = "all",
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Rank agreement of benchmark and downstream results. Does accuracy rank RMs as use does? NDCG, weighted tau, Spearman, RBO, Kendall, Pearson."""
    from prbench.meta import PAPER_COLUMNS, fmt_ci, main_rows, meta_evaluate, write_meta

    with progress(quiet or json_out) as bar:  # bootstraps and permutations: the ticker speaks while they run
        bar.add_task("meta: correlating benchmark and downstream results", total=None)
        res = meta_evaluate(runs, downstream, summary=summary, seed=seed, n_boot=n_boot, n_perm=n_perm, p=rbo_p,
                            k=ndcg_k, conditions=split_csv(condition), match_condition=match_condition,
                            pairing=pairing, bon_curve=bon_curve, bon_k=bon_k)
    paths = write_meta(res, out)
    if json_out:
        emit_json({**res.model_dump(), "files": {k: str(v) for k, v in paths.items()}})
        return
    if quiet:
        return
    rows = [(r.benchmark.label, r.setting.label, r.n_rms,
             *([fmt_ci(r.metrics[name]) for name, _ in PAPER_COLUMNS] if r.metrics else
               [r.note or "-"] + [""] * (len(PAPER_COLUMNS) - 1))) for r in main_rows(res)]
    table(f"rank agreement over RMs, value [95% CI] (benchmark summary: {summary})",
          ["benchmark", "setting", "RMs", *[label for _, label in PAPER_COLUMNS]], rows)
    from prbench.meta import CROSS_LABELS, CROSS_METRICS

    for c in res.cross_benchmark:  # several benchmarks: which one tracks this setting best
        cells = []
        for e in c.benchmarks:
            vals = [fmt_ci(e.metric(m)) + (" *" if c.best[m] == e.benchmark else "") for m in CROSS_METRICS]
            cells.append((e.benchmark, e.n_rms, *vals))
        table(f"{c.setting}: which benchmark ranks the RMs most like it (* best per metric; best overall: "
              f"{c.best_overall or '-'})", ["benchmark", "RMs", *[CROSS_LABELS[m] for m in CROSS_METRICS]], cells)
    for note in res.notes:
        if not note.startswith("skipped: "):  # a damaged run's line was logged once when it was read
            typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {paths['json']}, {paths['csv']} and {paths['md']}")


def report(
    runs_dir: Annotated[Path, typer.Argument(help="Runs folder (eval runs, downstream results, build report).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")] = Path("report.html"),
    title: ReportTitle = "prbench report",
    published: PublishedFile = None,
    seed: Seed = 0,
    n_boot: NBoot = 1000,
    n_perm: NPerm = 1000,
    meta_json: Annotated[Path | None, typer.Option("--meta", help="Use this meta.json (from `prbench meta`) instead of recomputing.")] = None,
    quiet: Quiet = False,
) -> None:
    """Write one self-contained HTML report. Tables, plots, meta-evaluation and provenance."""
    from prbench.report import build_report, collect

    pub = _read_json(published, "published numbers")
    if pub is not None and not isinstance(pub, dict):
        raise PrbenchError(f"{published}: published numbers must be a JSON object "
                           "{model_spec: {condition: {category: accuracy %}}}")
    from prbench.meta.result import MetaResult

    meta_res = MetaResult.read(meta_json) if meta_json is not None else None
    d = collect(runs_dir)  # read once: a damaged run folder gives its one line once
    path = build_report(runs_dir, output, title=title, published=pub if isinstance(pub, dict) else None, seed=seed,
                        n_boot=n_boot, n_perm=n_perm, meta=meta_res, data=d)
    if not quiet:
        typer.echo(f"wrote {path}")
        typer.echo(f"looked under {runs_dir.resolve()}: {len(d.evals)} eval runs, {len(d.downstream)} downstream.json, "
                   f"{len(d.policy_accuracy)} policy-accuracy runs"
                   + ("" if d.downstream or d.policy_accuracy else
                      " (bon / rgd results written elsewhere are not seen: give their --out inside this folder, "
                      "or run `prbench meta --runs RUNS --downstream DIR`)"), err=True)


def _read_json(path: Path | None, what: str) -> object:
    """The parsed file (None when not given); an unreadable one is a one-line error naming `what` it holds."""
    if path is None:
        return None
    import json


    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PrbenchError(f"{path}: cannot read {what} ({exc})") from None
