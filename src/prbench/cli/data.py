"""`prbench data ...`: validate, describe and convert benchmark files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import Categories, DataArg, Format, Json, Limit, Quiet, Split, split_csv
from prbench.cli.output import emit_json, table
from prbench.cli.train import synth_users
from prbench.data import iter_examples, load_examples, write_examples
from prbench.data.stats import dataset_stats
from prbench.errors import DataError, PrbenchError
from prbench.raw import Kind as RecordKind

app = typer.Typer(help="Validate, describe and convert benchmark data.", no_args_is_help=True)
Kind = Annotated[str, typer.Option(help="'benchmark' (with chosen/rejected) or 'source' (LaMP-QA form).")]


def _kind(src: str, kind: str | None, format_: str | None = None) -> RecordKind | None:
    """The record kind asked for; with --format and no --kind, the kind that format holds."""
    if kind == "benchmark":
        return "benchmark"
    if kind == "source":
        return "source"
    if kind:  # never read an unknown kind as source items
        raise PrbenchError(f"--kind {kind!r}: use 'benchmark' or 'source'")
    if format_:
        return None
    return "source" if src == "sample:source" else "benchmark"


class _Faults(list[DataError]):
    """The faults `validate` shows (the first `keep`) and how many there were in all."""

    def __init__(self, keep: int):
        super().__init__()
        self.keep, self.total, self.leaks = keep, 0, 0

    def append(self, fault: DataError) -> None:
        from prbench.schema import is_answer_leak

        self.total += 1
        self.leaks += is_answer_leak(fault)
        if len(self) < self.keep:
            super().append(fault)


MaxFaults = Annotated[int, typer.Option("--max-faults", min=1, metavar="N",
                                        help="Faults printed at most (all are counted).")]


@app.command()
def validate(src: DataArg, kind: Kind = "", format_: Format = None, split: Split = "test",
             max_faults: MaxFaults = 20, json_out: Json = False) -> None:
    """Check every record of a data source. Exit 0 when all are valid, else print every fault (file:line: field:
    why, up to --max-faults) with their count and exit 2. Fields the schema does not name are listed; a near-miss
    of a known field (`userid` for `user_id`) is a fault."""
    from collections import Counter

    from prbench.raw import unknown_fields

    faults = _Faults(max_faults)
    unknown: Counter[str] = Counter()
    n = 0
    for rec in iter_examples(src, _kind(src, kind, format_), split=split, format=format_, faults=faults):
        n += 1
        unknown.update(unknown_fields(rec))
    extra = {"unknown_fields": dict(unknown)} if unknown else {}
    if json_out:
        emit_json({"valid": not faults.total, "records": n, "faults": faults.total, "answer_leaks": faults.leaks,
                   "shown": [str(f) for f in faults], **extra})
    elif not faults.total:
        typer.echo(f"{src}: {n} valid records")
    if unknown and not json_out:
        listed = ", ".join(f"{name} ({count} record{'s' * (count != 1)})" for name, count in unknown.most_common(10))
        typer.echo(f"note: fields no reader uses (kept with the records): {listed}", err=True)
    if faults.total == 1:
        raise faults[0]  # one fault: its own line, as every reader reports it
    if faults.total:
        for f in faults if not json_out else ():
            typer.echo(f"error: {f}", err=True)
        shown = f"; the first {len(faults)} shown (--max-faults)" if faults.total > len(faults) else ""
        held = (f" ({faults.leaks} record{'s' * (faults.leaks != 1)} whose profile holds its own answer)"
                if faults.leaks else "")
        raise DataError(str(src), None, None, f"{faults.total} faults{held}, {n} valid records{shown}")


@app.command()
def formats(json_out: Json = False) -> None:
    """List every data format prbench reads. Built in and plug-ins: kind, fields read, headline rule, source."""
    from prbench.formats import describe

    rows = describe()
    if json_out:
        emit_json(rows)
        return
    table("data formats (--format NAME)", ["name", "kind", "fields read", "headline (accuracy / format_score)",
                                           "source"],
          [(r["name"], r["kind"], r["fields"], r["headline"], r["source"]) for r in rows])


@app.command()
def detect(src: DataArg, split: Split = "test") -> None:
    """Print the format detected from the first row's columns."""
    from prbench.formats import detect as detect_format

    typer.echo(detect_format(src, split))


@app.command()
def stats(
    src: DataArg, kind: Kind = "", format_: Format = None, categories: Categories = None, split: Split = "test",
    json_out: Json = False, quiet: Quiet = False,
) -> None:
    """Describe a data source. Items per category, users, profile and rubric sizes, response lengths and length balance."""
    items = load_examples(src, _kind(src, kind, format_), categories=split_csv(categories), split=split,
                          format=format_)
    s = dataset_stats(items)
    if json_out:
        emit_json(s)
        return
    rows = []
    for key, value in s.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append((key, value))
    if not quiet:
        table(f"{src}", ["statistic", "value"], rows)


@app.command()
def convert(
    src: DataArg,
    dst: Annotated[Path, typer.Argument(help="Output .jsonl, .jsonl.gz, .json or .parquet.")],
    kind: Kind = "",
    format_: Format = None,
    categories: Categories = None,
    limit: Limit = None,
    split: Split = "test",
) -> None:
    """Convert a data source to JSONL, JSON or parquet. Validated on the way."""
    items = load_examples(src, _kind(src, kind, format_), categories=split_csv(categories), limit=limit, split=split,
                          format=format_)
    n = write_examples(items, dst)
    typer.echo(f"wrote {n} records to {dst}")


app.command("synth-users")(synth_users)  # a training data set, written by `prbench.cli.train`
