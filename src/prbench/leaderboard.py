"""Collect run summaries into a leaderboard and compare two runs item by item.

One row per run identity: data, model (its spec and the options that decide results), condition and
the run settings that change a number (`top_k`, `retriever`, `max_context_chars`, `planner_file`,
`both_orders`; each only under the conditions it acts on, so a planner file never splits the `none`
rows). A row holds accuracy (ties 0.5) with its bootstrap 95% CI, per category too, the gain over the
wrong-user control where that ran (the validity card), the people a trained RM was scored on that it was
trained on (`per_user`), and the reasons it is not ranked (`prbench.evaluation.validity.faults`). Rows are sorted by
data set, condition (the toolkit's order: none, profile, planner, oracle, wrong-profile, then history and
persona), then accuracy, best first. A headline per data set answers the toolkit's question first: does
an RM use the person (profile minus wrong-profile, paired), then which model is best among those whose
validity holds; a model that scores higher but fails a check is named with the reason, never crowned.
Runs are read through `prbench.runkinds.scan_runs`: a damaged run folder is skipped with the one warning
line meta and the report give too (file, line and the fix); the other runs still show.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_serializer

from prbench.context.conditions import ALL_CONDITIONS
from prbench.errors import DataError, PrbenchError
from prbench.evaluation import validity
from prbench.runkinds import NotARun, Run, open_run, scan_runs
from prbench.runkinds.base import run_credits
from prbench.schema import CATEGORY_SHORT
from prbench.stats import metrics
from prbench.stats.power import resolvable
from prbench.store.records import Accuracy, EvalSummary, Gain, ValidityCard
from prbench.store.runs import write_json_atomic


class RunConfig(BaseModel):
    """The part of an eval run's config.json that decides a leaderboard row (its other settings do not)."""

    model_config = ConfigDict(extra="ignore")
    model_options: dict[str, Any] = {}
    both_orders: bool = False
    top_k: int | None = None
    retriever: str | None = None
    max_context_chars: int | None = None
    planner_file: str | None = None

    @field_validator("model_options", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return {} if v is None else v


class Cell(BaseModel):
    """One accuracy cell of a row: a condition's (with its CI, invalid count and run folder) or a category's."""

    accuracy: float | None
    n: int | None
    ci_low: float | None = None
    ci_high: float | None = None
    n_invalid: int | None = None
    n_total: int | None = None
    path: str | None = None

    @model_serializer(mode="wrap")
    def _short(self, handler: Any) -> Any:
        out = handler(self)  # a category's cell is accuracy and n only
        return out if self.path is not None else {"accuracy": out["accuracy"], "n": out["n"]}


class PeopleCell(BaseModel):
    """A trained RM's people: those it was trained on (seen) and the others, each part's accuracy."""

    seen: int
    unseen: int
    seen_share: float
    seen_accuracy: float | None
    unseen_accuracy: float | None


class Row(BaseModel):
    """One leaderboard row (see the module docstring); optional parts are absent from its JSON when unset."""

    model_config = ConfigDict(validate_assignment=True)
    data: str
    model: str
    spec: str
    condition: str
    options: dict[str, Any]
    settings: dict[str, Any]
    n_total: int
    baseline: bool
    cells: dict[str, Cell]
    usd: float | None = None
    validity: ValidityCard | None = None
    people: PeopleCell | None = None
    faults: list[str] = []
    resolvable: float | None = None
    label: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> Any:
        out = handler(self)
        for name in ("usd", "validity", "people", "resolvable", "label"):
            if out[name] is None:
                del out[name]
        return out

    @property
    def cell(self) -> Cell:
        """The row's own condition's cell."""
        return self.cells[self.condition]

    def cell_at(self, key: str) -> Cell | None:
        """The cell of `key` (a condition, or condition/category), None where the run has none."""
        if key not in self.cells:
            return None
        return self.cells[key]

    @property
    def name(self) -> str:
        return self.label if self.label is not None else self.model

    @property
    def gain(self) -> Gain | None:
        return self.validity.gain if self.validity else None


class Side(BaseModel):
    """One run of a comparison."""

    model: str
    condition: str
    path: str


class Comparison(BaseModel):
    """`compare_runs`: A - B over the items both scored validly (`metrics.paired_comparison`'s numbers)."""

    a: Side
    b: Side
    n_shared: int
    only_a: int
    only_b: int
    n: int
    diff: float
    ci_low: float
    ci_high: float
    mcnemar_p: float
    n_discordant: int
    n_a_only: int
    n_b_only: int


def find_runs(root: str | Path) -> list[Path]:
    """Every run folder (holding summary.json) below `root`."""
    paths = sorted(p.parent for p in Path(root).rglob("summary.json") if (p.parent / "examples.jsonl").exists())
    if not paths:
        raise PrbenchError(f"{root}: no eval runs found (folders with summary.json and examples.jsonl)")
    return paths


def load_run(path: str | Path) -> Run:
    """An eval run (summary and checked records); another kind of run folder is refused by its kind."""
    p = Path(path)
    if not (p / "summary.json").exists():
        raise PrbenchError(f"{p}: not a run folder (no summary.json)")
    try:
        run = open_run(p)
    except NotARun:
        raise PrbenchError(f"{p}: a non-run folder, not an eval run") from None
    if run.kind.role != "benchmark":
        raise PrbenchError(f"{p}: a {run.kind.name} folder, not an eval run")
    return run


def _text(acc: float | None, lo: float | None, hi: float | None) -> str:
    if acc is None:
        return "-"
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else f"{100 * acc:.1f}"


log = logging.getLogger(__name__)


SETTINGS = ("top_k", "retriever", "max_context_chars", "planner_file")
"""Run settings that change a number (the context a model sees); shown where they differ. How a judge is asked
(`both_orders`) is part of the model's identity, named in its label ("(both orders)")."""

_EVIDENCE = frozenset({"profile", "wrong-profile", "history", "wrong-history"})
APPLIES: dict[str, frozenset[str] | None] = {
    "top_k": _EVIDENCE, "retriever": _EVIDENCE, "planner_file": frozenset({"planner"}),
    "max_context_chars": frozenset(ALL_CONDITIONS) - {"none"}}
"""The conditions each setting acts on (None: all): elsewhere it cannot change the number and names no row."""

SORTED = "rows by condition (none, profile, planner, oracle, wrong-profile, history, persona, others by name), then accuracy, best first"


def _applies(key: str, condition: str) -> bool:
    where = APPLIES[key]
    return where is None or condition in where


def _identity(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model options, run settings) of a run that decide its results: the settings from the summary (runs since it
    carries them), else config.json (read by the checked reader); a setting that does not act on the run's
    condition is left out."""
    cfg = RunConfig.model_validate(run.config)
    ident = dict(cfg.model_options)
    if cfg.both_orders:
        ident["both_orders"] = True
    stated = run.summary_as(EvalSummary).settings
    source: Any = stated if stated is not None else cfg
    return ident, {k: getattr(source, k) for k in SETTINGS if _applies(k, run.condition)}


def _short(v: Any) -> str:
    """A setting's value as shown: a file path by its name (a row never carries a machine's absolute path)."""
    if isinstance(v, str) and ("/" in v or os.sep in v) and Path(v).suffix:
        return Path(v).name
    return v if isinstance(v, str) else json.dumps(v)


def setting_text(k: str, *values: Any) -> str:
    """`top_k=5`, or `top_k=5/10` for several values; None reads 'default'."""
    shown = ("default" if v is None else _short(v) for v in values)
    return f"{k}={'/'.join(shown)}"


def _label(model: str, options: dict[str, Any], differing: Sequence[str]) -> str:
    parts = [f"{k}={json.dumps(options[k]) if not isinstance(options[k], str) else options[k]}"
             if k in options else f"{k}=default" for k in differing]
    return f"{model} ({', '.join(parts)})" if parts else model


def _cell(m: Accuracy, path: Path | None = None, n_invalid: int | None = None,
          n_total: int | None = None) -> Cell:
    if path is None:
        return Cell(accuracy=m.accuracy, n=m.n)
    return Cell(accuracy=m.accuracy, n=m.n, ci_low=m.ci_low, ci_high=m.ci_high, n_invalid=n_invalid,
                n_total=n_total, path=str(path))


def is_control_run(run: Run) -> bool:
    """A baseline (control) row, never ranked as a model: from the run's recorded capabilities (runs before they
    were recorded: its kind). The report's rule too (`report.widgets.is_baseline`)."""
    caps = run.typed.capabilities if isinstance(run.typed, EvalSummary) else None
    return caps.is_control if caps is not None else is_control_spec(run.key)


def is_control_spec(spec: str) -> bool:
    """Whether the RM kind a spec names is a control, from its class; unknown kinds are not."""
    from prbench.rewards.base import capabilities

    try:
        return capabilities(str(spec)).is_control
    except PrbenchError:
        return False


def leaderboard(root: str | Path) -> list[Row]:
    """One row per (data, model, options, condition, settings), sorted (SORTED); see the module docstring."""
    scan = scan_runs([root])
    evals = scan.of("benchmark")
    if not evals and not scan.skipped:  # no eval run at all is an error, not an empty table
        raise PrbenchError(f"{root}: no eval runs found (folders with summary.json and examples.jsonl)")
    return rows_of(evals)


def rows_of(evals: Sequence[Run]) -> list[Row]:
    """The leaderboard's rows of these eval runs (what the report's headline reads too)."""
    rows: dict[tuple[str, str, str, str], Row] = {}
    for run in evals:
        try:
            options, settings = _identity(run)
        except (DataError, ValidationError) as exc:  # a damaged config.json: the run's identity is unknown
            log.warning("skipped: %s", exc if isinstance(exc, DataError) else f"{run.path / 'config.json'}: {exc}")
            continue
        s = run.summary_as(EvalSummary)
        m = s.metrics
        key = (s.data, s.rm, s.condition, json.dumps([options, settings], sort_keys=True, default=str))
        row = rows[key] = Row(data=s.data, model=s.model, spec=s.rm, condition=s.condition,
                              options=options, settings=settings, n_total=s.n_total,
                              baseline=is_control_run(run), cells={s.condition: _cell(m, run.path, m.n_invalid,
                                                                                      s.n_total)})
        if s.cost is not None and s.cost.usd is not None:  # the run's API spend
            row.usd = s.cost.usd
        if s.validity is not None:  # the personalization validity card (prbench.evaluation.validity)
            row.validity = s.validity
        for cat, g in (m.categories.groups if m.categories else {}).items():
            row.cells[f"{s.condition}/{CATEGORY_SHORT.get(cat, cat)}"] = _cell(g)
        if (who := validity.people(s)) is not None:  # a trained RM: the people it was trained on, apart
            row.people = PeopleCell(seen=who.seen, unseen=who.unseen, seen_share=who.share,
                                    seen_accuracy=who.seen_accuracy, unseen_accuracy=who.unseen_accuracy)
        row.faults = validity.faults(s, run.items)
        try:  # the smallest difference this run resolves (prbench.stats.power)
            mde = resolvable(run.items)
        except DataError as exc:  # damaged records: the accuracy still shows, this column does not
            log.warning("no resolvable difference: %s", exc)
            mde = None
        if mde is not None:
            row.resolvable = mde
    by_model: dict[tuple[str, str], list[Row]] = {}
    for r in rows.values():
        by_model.setdefault((r.data, r.model), []).append(r)
    for group in by_model.values():  # rows of one model: labelled with the options that tell them apart
        keys = sorted({k for r in group for k in r.options})
        differing = [k for k in keys
                     if len({json.dumps(r.options.get(k), sort_keys=True) for r in group}) > 1]  # free-form
        for r in group:
            label = _label(r.model, r.options, differing)
            if "both_orders" in r.options and r.options["both_orders"] and "both orders" not in label:
                label += " (both orders)"
            r.label = label
    order = {c: i for i, c in enumerate(ALL_CONDITIONS)}

    def acc(r: Row) -> float:
        a = r.cell.accuracy
        return -1.0 if a is None else a
    return sorted(rows.values(), key=lambda r: (r.data, order.get(r.condition, len(order)), r.condition,
                                                -acc(r), r.name))


def _gain(r: Row) -> Gain | None:
    return r.gain


def _gain_diff(r: Row) -> float:
    """The profile - wrong-profile difference of a row that has one (-inf for one that has none)."""
    gain = _gain(r)
    return float(gain.diff) if gain else float("-inf")


@dataclass
class Headline:
    """A data set's answer: does an RM use the person, and which model is best among those whose checks hold."""

    data: str
    person: Row | None = None  # the row whose gain over its wrong-user control is largest (checks hold)
    person_baseline: bool = False  # ... and it is a baseline: no model (not a baseline) ran with its control
    best: Row | None = None  # the most accurate non-baseline row whose checks hold (no control condition)
    best_baseline: Row | None = None
    not_ranked: list[Row] = field(default_factory=list)  # scored higher than `best` but failed a check
    models: bool = False  # any scored row that is not a baseline

    def lines(self, html: bool = False) -> list[str]:
        """The headline as sentences: plain for the terminal, HTML (escaped, names in bold) for the report."""
        q, b = _quoting(html)
        out = [f"{q(self.data)}: does an RM use the person? {self.person_text(html)}",
               f"{q(self.data)}: {self.best_text(html)}"]
        out += [f"{q(self.data)}: not named best: {b(_row_name(r))} under {q(r.condition)}, {q(_acc_text(r))}: "
                f"{q('; '.join(r.faults))}." for r in self.not_ranked]
        return out

    def person_text(self, html: bool = False) -> str:
        q, b = _quoting(html)
        r = self.person
        if r is None:
            return ("not measured: no run has its wrong-user control beside it (prbench eval -c profile,wrong-profile "
                    "scores the same RM with another person's evidence).")
        card = r.validity
        g = r.gain
        assert card is not None and g is not None  # `person` is a row with a gain (headlines)
        verdict = ("yes" if g.ci_low is not None and g.ci_low > 0 else "not beyond chance")
        who = b(_row_name(r)) + (" (a baseline; no other RM with its control passed its checks)"
                                 if self.person_baseline else "")
        return (f"{verdict}: {who}: {q(card.condition)} - {q(card.control)} {100 * g.diff:+.1f} points "
                f"[{_pp(g.ci_low)}, {_pp(g.ci_high)}], p = {_p(g.p_value)}, paired over {card.n_shared} "
                "pairs.")

    def best_text(self, html: bool = False) -> str:
        q, b = _quoting(html)
        if self.best is None:
            text = ("no reward model (not a baseline) is named best: "
                    + ("none is both scored and free of a failed check" if self.models else "only baselines ran"))
        else:
            r = self.best
            text = (f"the best reward model (not a baseline) is {b(_row_name(r))} under {q(r.condition)}: "
                    f"{q(_acc_text(r))}")
        if self.best_baseline is not None:
            bb = self.best_baseline
            text += f"; the best baseline, {q(_row_name(bb))} under {q(bb.condition)}: {q(_acc_text(bb))}"
        return text + "."


def _quoting(html: bool) -> tuple[Any, Any]:
    """(escape, bold) for text in a headline: identity for the terminal, HTML escapes and <b> for the report."""
    if not html:
        return str, str
    from html import escape

    return escape, lambda s: f"<b>{escape(s)}</b>"


def _pp(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def _accuracy(r: Row) -> float | None:
    return r.cell.accuracy


def _acc_text(r: Row) -> str:
    c = r.cell
    return f"{_text(c.accuracy, c.ci_low, c.ci_high)} % on {r.n_total} pairs"


def headlines(rows: Sequence[Row]) -> list[Headline]:
    """One Headline per data set (see the module docstring): a row with a failed check is never best."""
    out = []
    for data in dict.fromkeys(r.data for r in rows):
        group = [r for r in rows if r.data == data and _accuracy(r) is not None]
        h = Headline(data)
        cards = [r for r in group if _gain(r) and not r.faults]
        models = [r for r in cards if not r.baseline]
        if cards:
            h.person = max(models or cards, key=_gain_diff)
            h.person_baseline = not models
        ranked = [r for r in group if not r.condition.startswith("wrong-")]  # a control condition is never best
        h.models = any(not r.baseline for r in group)
        best = [r for r in ranked if not r.baseline and not r.faults]
        h.best = max(best, key=lambda r: _accuracy(r) or 0.0, default=None)
        h.best_baseline = max((r for r in ranked if r.baseline), key=lambda r: _accuracy(r) or 0.0, default=None)
        floor = _accuracy(h.best) if h.best is not None else -1.0
        h.not_ranked = sorted((r for r in ranked if not r.baseline and r.faults
                               and (_accuracy(r) or 0.0) >= (floor or 0.0)), key=lambda r: -(_accuracy(r) or 0.0))
        out.append(h)
    return out


def columns(rows: Sequence[Row]) -> list[str]:
    """The categories the rows hold (short names, sorted): the leaderboard's per-category columns."""
    return sorted({k.split("/", 1)[1] for r in rows for k in r.cells if "/" in k})


def _row_name(row: Row) -> str:
    return row.name


def differing_settings(rows: Sequence[Row]) -> list[str]:
    """The run settings (SETTINGS) whose values differ between these rows (a setting not acting on a row's
    condition does not count): numbers not comparable as they stand."""
    return [k for k in SETTINGS
            if len({json.dumps(r.settings[k]) for r in rows if k in r.settings}) > 1]


def _settings_text(row: Row, keys: Sequence[str]) -> str:
    return ", ".join(setting_text(k, row.settings[k]) for k in keys if k in row.settings) or "-"


def _normal_mode(path: Path) -> None:
    """The mode a plain open() gives under the umask (mkstemp's temp file, renamed, is 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


GAIN = "condition - wrong-user control"
"""What the gain column holds: the condition's accuracy minus its wrong-user control's, in points."""


def write_leaderboard(rows: Sequence[Row], out_dir: str | Path) -> tuple[Path, Path]:
    """leaderboard.csv (one line per row: accuracy and CI, categories, settings, gain, seen people, checks) and
    leaderboard.json (rows and headlines), one file mode."""
    out = Path(out_dir)
    cats = columns(rows)
    csv_path, json_path = out / "leaderboard.csv", out / "leaderboard.json"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["data", "model", "condition", "n", "accuracy", "ci_low", "ci_high", *cats, *SETTINGS,
                    "both_orders", "control", "gain", "gain ci_low", "gain ci_high", "gain p", "seen people", "unseen people",
                    "seen share", "seen accuracy", "unseen accuracy", "not ranked because", "usd"])
        for r in rows:
            c, g, p = r.cell, _gain(r), r.people
            w.writerow([r.data, _row_name(r), r.condition, r.n_total, c.accuracy, c.ci_low, c.ci_high,
                        *[r.cells[f"{r.condition}/{k}"].accuracy if f"{r.condition}/{k}" in r.cells
                          else None for k in cats],
                        *[_short(r.settings[k]) if k in r.settings and r.settings[k] is not None else None
                          for k in SETTINGS],
                        bool(r.options["both_orders"]) if "both_orders" in r.options else False,
                        r.validity.control if r.validity is not None else None,
                        *([g.diff, g.ci_low, g.ci_high, g.p_value] if g else [None] * 4),
                        *([p.seen, p.unseen, p.seen_share, p.seen_accuracy, p.unseen_accuracy] if p else [None] * 5),
                        "; ".join(r.faults) or None, r.usd])
    write_json_atomic(json_path, {"rows": [r.model_dump() for r in rows],
                                  "headlines": [h.lines() for h in headlines(rows)],
                                  "sorted": SORTED,
                                  "note": "accuracy as a fraction, ties count 0.5; CI: percentile bootstrap 95%"})
    _normal_mode(json_path)
    return csv_path, json_path


def render_rows(rows: Sequence[Row], with_categories: bool = False, wide: bool = False
                ) -> tuple[list[str], list[list[str]]]:
    """(head, body): model, condition, the settings that differ between these rows, n, accuracy [CI] (marked
    "seen" where the RM was trained on the people), then where any row has them: the gain over the wrong-user
    control, the people it was trained on (seen vs unseen accuracy), why a row is not ranked; `wide` adds the
    smallest difference each run resolves and the gain's p-value, `with_categories` accuracy per category."""
    keys = differing_settings(rows)
    cats = columns(rows) if with_categories else []
    head = ["model", "condition", *(["settings"] if keys else []), "n", "accuracy % [95% CI]", *cats]
    body = []
    for r in rows:
        c = r.cell
        seen = r.people.seen_share if r.people is not None and r.people.seen else None
        mark = "" if seen is None else " seen" if seen >= 1 else f" seen {100 * seen:.0f}%"
        body.append([_row_name(r), r.condition, *([_settings_text(r, keys)] if keys else []), str(r.n_total),
                     _text(c.accuracy, c.ci_low, c.ci_high) + mark,
                     *[_fmt(r.cell_at(f"{r.condition}/{k}")) for k in cats]])
    if any(_gain(r) for r in rows):  # personalization gain: a condition minus its wrong-user control, in points
        head.append("gain over control (pts)")
        for r, line in zip(rows, body):
            g = _gain(r)
            line.append("-" if not g else f"{100 * g.diff:+.1f} [{_pp(g.ci_low)}, {_pp(g.ci_high)}]"
                        + (f" p={_p(g.p_value)}" if wide else ""))
    if any(r.people is not None for r in rows):  # a trained RM: the people it was trained on, their accuracy apart
        head.append("people trained on: acc")
        for r, line in zip(rows, body):
            line.append(_people_text(r.people) if r.people is not None else "-")
    if any(r.faults for r in rows):
        head.append("not ranked because")
        for r, line in zip(rows, body):
            line.append("; ".join(r.faults) or "-")
    if wide and any(r.resolvable is not None for r in rows):  # 80% power at level 0.05 against a fixed value
        head.append("resolves (pts)")
        for r, line in zip(rows, body):
            line.append(f"{100 * r.resolvable:.1f}" if r.resolvable is not None else "-")
    if any(r.usd is not None for r in rows):  # a cost column once any run spent API money
        head.append("$")
        for r, line in zip(rows, body):
            line.append(f"{r.usd:.2f}" if r.usd is not None else "-")
    return head, body


def _fmt(cell: Cell | None) -> str:
    return "-" if cell is None or cell.accuracy is None else f"{100 * cell.accuracy:.1f}"


def _people_text(p: PeopleCell) -> str:
    """'seen 40/40: 96.0; unseen 0: -' (accuracy over each part's pairs)."""
    def acc(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}"
    return (f"seen {p.seen}/{p.seen + p.unseen}: {acc(p.seen_accuracy)}; "
            f"unseen {p.unseen}: {acc(p.unseen_accuracy)}")


def wrap_name(name: str, width: int = 20) -> str:
    """A model name in lines of at most `width` where it can break after ':', '/' or a space, so a narrow
    terminal wraps it there and never mid-word ("baseline:embeddi / ng"); a part longer than `width` stays whole."""
    parts = re.findall(r"[^:/ ]+[:/ ]?|[:/ ]", name)
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1].rstrip()) + len(part.rstrip()) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)  # a line broken at a space keeps it: joined back, the name is whole


LEGEND = ("accuracy: share of pairs where the RM prefers the chosen answer (ties 0.5), 95% bootstrap CI; "
          "seen: scored on people the RM was trained on; gain: accuracy minus the same RM's with another person's "
          "evidence (wrong-*), paired; resolves (--wide): the smallest difference in accuracy points the run tells "
          f"from a fixed value with 80% power at level 0.05 (`prbench power`); {SORTED}.")


def render_tables(rows: Sequence[Row], with_categories: bool = False, wide: bool = False
                  ) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, head, body) per data set, so numbers of different benchmarks never share a column."""
    out = []
    for data in dict.fromkeys(r.data for r in rows):
        group = [r for r in rows if r.data == data]
        head, body = render_rows(group, wide=wide)
        body = [[wrap_name(row[0]), *(c.replace(" [", "\n[") if not wide else c for c in row[1:])] for row in body]
        out.append((f"{data}: accuracy % [95% CI]", head, body))
        if with_categories and columns(group):
            out.append((f"{data}: accuracy % by category", *_category_rows(group)))
    return out


def _category_rows(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    """(model, category, accuracy per condition): as many columns as conditions, so it reads at 100 columns."""
    conds = list(dict.fromkeys(r.condition for r in rows))
    keys = differing_settings(rows)
    models: dict[str, dict[str, Row]] = {}
    for r in rows:  # a model's rows, one per condition (settings that differ name the model apart)
        name = _row_name(r) + (f" ({_settings_text(r, keys)})" if keys and _settings_text(r, keys) != "-" else "")
        models.setdefault(name, {})[r.condition] = r
    body = []
    for name, by_cond in models.items():
        first = True
        for cat in columns(rows):
            accs = [by_cond[c].cell_at(f"{c}/{cat}") if c in by_cond else None for c in conds]
            if all(a is None for a in accs):
                continue
            body.append([wrap_name(name) if first else "", cat, *[_fmt(a) for a in accs]])
            first = False
    return ["model", "category", *conds], body


def compare_runs(path_a: str | Path, path_b: str | Path, seed: int = 0, n_boot: int = 2000) -> Comparison:
    """Paired difference A - B on the items both runs scored validly, with bootstrap CI and McNemar."""
    run_a, run_b = load_run(path_a), load_run(path_b)
    sa, sb = run_a.summary_as(EvalSummary), run_b.summary_as(EvalSummary)
    a, b = run_credits(run_a), run_credits(run_b)
    shared = sorted(a.keys() & b.keys())
    if not shared:
        raise PrbenchError("the two runs share no validly scored item")
    res = metrics.paired_comparison(np.array([a[i] for i in shared]), np.array([b[i] for i in shared]),
                                    seed=seed, n_boot=n_boot)
    return Comparison(a=Side(model=sa.model, condition=sa.condition, path=str(path_a)),
                      b=Side(model=sb.model, condition=sb.condition, path=str(path_b)),
                      n_shared=len(shared), only_a=len(a.keys() - b.keys()), only_b=len(b.keys() - a.keys()),
                      **res)
