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


@app.command()
def personalize(
    src: Annotated[Path, typer.Argument(help="Annotator-level file: .jsonl, .jsonl.gz, .json, .parquet, .csv or .tsv.")],
    by: Annotated[str, typer.Option(help="The annotator field: one person per value.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for train.jsonl, test.jsonl and manifest.json.")],
    prompt: Annotated[str | None, typer.Option(help="Prompt field (default: prompt, question, instruction, query, "
                                                    "input or context; else the user turns of answer A).")] = None,
    a: Annotated[str | None, typer.Option("--a", help="Answer A field (default: response_a, answer_a, "
                                                      "completion_a, ..., conversation_a).")] = None,
    b: Annotated[str | None, typer.Option("--b", help="Answer B field (default: as --a with b / 2).")] = None,
    winner: Annotated[str | None, typer.Option(help="Winner field (default: winner, preference, "
                                                    "overall_preference, label or choice).")] = None,
    a_wins: Annotated[str | None, typer.Option(help="Comma list of winner values for A (default: model_a, a, 1, "
                                                    "response_a, ...).")] = None,
    b_wins: Annotated[str | None, typer.Option(help="Comma list of winner values for B (default: model_b, b, 2, "
                                                    "...).")] = None,
    ties: Annotated[str | None, typer.Option(help="Comma list of tie values (default: tie, tie (bothbad), "
                                                  "both_bad, equal, draw, ...).")] = None,
    signed: Annotated[bool, typer.Option(help="The winner is a signed score: < 0 A, > 0 B, 0 a tie.")] = False,
    turn: Annotated[str, typer.Option(help="With conversation answers: the judged turn's field (absent: the "
                                           "last turn).")] = "turn",
    time: Annotated[str | None, typer.Option(help="Field ordering a person's choices for --profile-order recent "
                                                  "(default: file order).")] = None,
    category: Annotated[str | None, typer.Option(help="Field copied to each record's category.")] = None,
    test_fraction: Annotated[float, typer.Option(help="Share of the people in the test part.")] = 0.5,
    seed: Annotated[int, typer.Option(help="Seed of the person split, the mirrored matching and profile samples.")
                    ] = 0,
    min_choices: Annotated[int, typer.Option(help="Fewest distinct judged pairs (ties not counted) an annotator "
                                                  "needs; others are left out, counted.")] = 3,
    profile_max: Annotated[int, typer.Option(help="Most past choices in a profile.")] = 30,
    profile_order: Annotated[str, typer.Option(help="Which past choices a capped profile keeps: sample (seeded) "
                                                    "or recent.")] = "sample",
    overwrite: Annotated[bool, typer.Option(help="Replace the records of an earlier run in --out.")] = False,
    json_out: Json = False,
) -> None:
    """Turn annotator-level judgments into personalized records.

    One row per annotator judgment in; records out whose profiles are the person's other choices (past
    choices), split by person, with a mirrored test."""
    from pydantic import ValidationError

    from prbench.data.personalize import PersonalizeConfig
    from prbench.data.personalize import personalize as build

    lists = {k: tuple(split_csv(v) or ()) for k, v in (("a_wins", a_wins), ("b_wins", b_wins), ("ties", ties)) if v}
    try:
        cfg = PersonalizeConfig.model_validate(
            {"by": by, "prompt": prompt, "a": a, "b": b, "winner": winner, "signed": signed, "turn": turn,
             "time": time, "category": category, "test_fraction": test_fraction, "seed": seed,
             "min_choices": min_choices, "profile_max": profile_max, "profile_order": profile_order, **lists})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PrbenchError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None
    m = build(src, out, cfg, overwrite=overwrite)
    if json_out:
        emit_json(m.model_dump(mode="json"))
        return
    c = m.counts
    typer.echo(f"read {c.rows} rows of {c.annotators} annotators ({', '.join(f'{k} <- {v}' for k, v in m.fields.items())})")
    typer.echo(f"left out: {c.ties} ties, {c.same_answers} rows with the same answer twice, "
               f"{m.too_few['annotators']} annotators with fewer than {cfg.min_choices} choices "
               f"({m.too_few['choices']} choices)")
    typer.echo(f"train: {m.records['train']} records of {m.people['train']} people; test: {m.records['test']} "
               f"records ({m.test_pairs} mirrored pairs) of {m.people['test_in_records']} of the {m.people['test']} "
               f"other people; {m.test_choices_unmirrored} test choices without a mirror left out of the test")
    typer.echo(f"profiles: {m.profile['min']:.0f}-{m.profile['max']:.0f} past choices (median "
               f"{m.profile['median']:.0f}); wrote {out}/train.jsonl, test.jsonl, manifest.json")


app.command("synth-users")(synth_users)  # a training data set, written by `prbench.cli.train`
