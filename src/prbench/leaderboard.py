"""Collect run summaries into a leaderboard and compare two runs item by item.

Rows are models (baselines included), columns are condition x category; each cell is
accuracy (ties 0.5) with its bootstrap 95% CI. A row is one run identity: data, spec and the
options that decide results (`model_options`, `both_orders`), so two runs of one model with
different options are two rows, labelled with the options that differ. Run settings that change
a number (`top_k`, `retriever`, `max_context_chars`, `planner_file`, `both_orders`) are part of the
identity too, and a table shows them where they differ between its rows; a row whose runs scored
different numbers of pairs says so in its n column. The columns are the
conditions the runs hold (history and persona conditions included), known ones first. Runs are
read through `prbench.runkinds.scan_runs`: a damaged run folder is skipped with the one warning
line meta and the report give too (file, line and the fix); the other runs still show.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from prbench import metrics
from prbench.conditions import ALL_CONDITIONS
from prbench.errors import DataError, PrbenchError
from prbench.power import resolvable
from prbench.records import Accuracy, EvalSummary
from prbench.runkinds import NotARun, Run, open_run, scan_runs
from prbench.runs import write_json_atomic
from prbench.schema import CATEGORY_SHORT


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


SETTINGS = ("top_k", "retriever", "max_context_chars", "planner_file", "both_orders")
"""Run settings that change a number (the context a model sees, how a judge is asked); shown where they differ."""


def _identity(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model options, run settings) of a run that decide its results (config.json, read by the checked reader)."""
    cfg = RunConfig.model_validate(run.config)
    ident = dict(cfg.model_options)
    if cfg.both_orders:
        ident["both_orders"] = True
    return ident, {k: getattr(cfg, k) for k in SETTINGS}


def setting_text(k: str, *values: Any) -> str:
    """`top_k=5`, or `top_k=5/10` for several values; None reads 'default'."""
    shown = ("default" if v is None else v if isinstance(v, str) else json.dumps(v) for v in values)
    return f"{k}={'/'.join(shown)}"


def _label(model: str, options: dict[str, Any], differing: Sequence[str]) -> str:
    parts = [f"{k}={json.dumps(options[k]) if not isinstance(options[k], str) else options[k]}"
             if k in options else f"{k}=default" for k in differing]
    return f"{model} ({', '.join(parts)})" if parts else model


def _cell(m: Accuracy, path: Path | None = None, n_invalid: int | None = None,
          n_total: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"accuracy": m.accuracy, "n": m.n}
    if path is not None:
        out.update(ci_low=m.ci_low, ci_high=m.ci_high, n_invalid=n_invalid, n_total=n_total, path=str(path))
    return out


def leaderboard(root: str | Path) -> list[dict[str, Any]]:
    """One row per (data, spec, options) with accuracy per condition and per condition x category."""
    scan = scan_runs([root])
    evals = scan.of("benchmark")
    if not evals and not scan.skipped:  # no eval run at all is an error, not an empty table
        raise PrbenchError(f"{root}: no eval runs found (folders with summary.json and examples.jsonl)")
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in evals:
        try:
            options, settings = _identity(run)
        except (DataError, ValidationError) as exc:  # a damaged config.json: the run's identity is unknown
            log.warning("skipped: %s", exc if isinstance(exc, DataError) else f"{run.path / 'config.json'}: {exc}")
            continue
        s = run.summary_as(EvalSummary)
        m = s.metrics
        key = (s.data, s.rm, json.dumps([options, settings], sort_keys=True, default=str))
        if key not in rows:
            rows[key] = {"data": s.data, "model": s.model, "spec": s.rm, "options": options,
                         "settings": settings, "cells": {}}
        row = rows[key]
        row["cells"][s.condition] = _cell(m, run.path, m.n_invalid, s.n_total)
        if s.cost is not None and s.cost.usd is not None:  # API spend of the row's runs, all conditions
            row["usd"] = row["usd"] + s.cost.usd if "usd" in row else s.cost.usd
        if s.validity is not None:  # the personalization validity card (prbench.validity)
            row.setdefault("validity", {})[s.condition] = s.validity.model_dump()
        for cat, g in (m.categories.groups if m.categories else {}).items():
            row["cells"][f"{s.condition}/{CATEGORY_SHORT.get(cat, cat)}"] = _cell(g)
        try:  # the smallest difference this run resolves (prbench.power)
            mde = resolvable(run.records)
        except DataError as exc:  # damaged records: the accuracy still shows, this column does not
            log.warning("no resolvable difference: %s", exc)
            mde = None
        if mde is not None:
            row.setdefault("resolvable", {})[s.condition] = mde
    by_model: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows.values():
        by_model.setdefault((r["data"], r["model"]), []).append(r)
    for group in by_model.values():  # rows of one model: labelled with what tells them apart
        keys = sorted({k for r in group for k in r["options"]})
        differing = [k for k in keys if len({json.dumps(r["options"].get(k), sort_keys=True) for r in group}) > 1]
        for r in group:
            r["label"] = _label(r["model"], r["options"], differing) if len(group) > 1 else r["model"]

    def best(r: dict[str, Any]) -> float:
        accs = [c["accuracy"] for k, c in r["cells"].items() if "/" not in k and c["accuracy"] is not None]
        return -max(accs) if accs else 0.0
    return sorted(rows.values(), key=lambda r: (r["data"], best(r), r["label"]))


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every condition the rows hold (known ones in their order, then the rest by name), then condition x category."""
    keys = {k for r in rows for k in r["cells"]}
    present = {k for k in keys if "/" not in k} | {k.split("/", 1)[0] for k in keys if "/" in k}
    conds = [c for c in ALL_CONDITIONS if c in present] + sorted(present - set(ALL_CONDITIONS))
    cats = sorted({k.split("/", 1)[1] for k in keys if "/" in k})
    return conds + [f"{c}/{cat}" for c in conds for cat in cats if f"{c}/{cat}" in keys]


_EMPTY: dict[str, Any] = {"accuracy": None, "ci_low": None, "ci_high": None}


def _at(row: dict[str, Any], col: str) -> tuple[float | None, float | None, float | None]:
    """(accuracy, ci_low, ci_high) of a row's cell (all None where the row has no run); categories carry no CI."""
    cell = {**_EMPTY, **row["cells"][col]} if col in row["cells"] else _EMPTY
    return cell["accuracy"], cell["ci_low"], cell["ci_high"]


def _name(row: dict[str, Any]) -> str:
    return row["label"] if "label" in row else row["model"]


def n_pairs(row: dict[str, Any]) -> list[int]:
    """The distinct numbers of pairs the row's runs scored (one per condition run); more than one is a mixed row."""
    return sorted({c["n_total"] for k, c in row["cells"].items() if "/" not in k and c.get("n_total") is not None})


def _n_text(row: dict[str, Any]) -> str:
    ns = n_pairs(row)
    return "-" if not ns else str(ns[0]) if len(ns) == 1 else f"MIXED {', '.join(map(str, ns))}"


def differing_settings(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The run settings (SETTINGS) whose values differ between these rows: numbers not comparable as they stand."""
    return [k for k in SETTINGS if len({json.dumps(r.get("settings", {}).get(k)) for r in rows}) > 1]


def _settings_text(row: dict[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(setting_text(k, row.get("settings", {}).get(k)) for k in keys)


def _normal_mode(path: Path) -> None:
    """The mode a plain open() gives under the umask (mkstemp's temp file, renamed, is 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def write_leaderboard(rows: Sequence[dict[str, Any]], out_dir: str | Path) -> tuple[Path, Path]:
    """leaderboard.csv (accuracy and CI columns, n, settings) and leaderboard.json (everything), one file mode."""
    out = Path(out_dir)
    cols = columns(rows)
    csv_path, json_path = out / "leaderboard.csv", out / "leaderboard.json"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        head = ["data", "model", "n"]
        for c in cols:
            head += [c, f"{c} ci_low", f"{c} ci_high"] if "/" not in c else [c]
        w.writerow([*head, *SETTINGS, f"personalization gain ({GAIN})", "usd"])
        for r in rows:
            line: list[Any] = [r["data"], _name(r), " ".join(map(str, n_pairs(r)))]
            for c in cols:
                acc, lo, hi = _at(r, c)
                line += [acc, lo, hi] if "/" not in c else [acc]
            sets = [r.get("settings", {}).get(k) for k in SETTINGS]
            w.writerow([*line, *sets, _gain_cell(r["validity"]) if "validity" in r else None, r.get("usd")])
    write_json_atomic(json_path, {"columns": cols, "rows": list(rows),
                                  "note": "accuracy as a fraction, ties count 0.5; CI: percentile bootstrap 95%"})
    _normal_mode(json_path)
    return csv_path, json_path


GAIN = "condition - wrong-profile"
"""What the gain column holds: the condition's accuracy minus its wrong-user control's, in points."""


def render_rows(rows: Sequence[dict[str, Any]], with_categories: bool = False) -> tuple[list[str], list[list[str]]]:
    """(head, body): model, n (pairs per run; MIXED when the row's runs differ), the settings that differ
    between these rows, accuracy per condition, then gain and cost where any row has them."""
    cols = [c for c in columns(rows) if with_categories or "/" not in c]
    keys = differing_settings(rows)
    body = [[_name(r), _n_text(r), *([_settings_text(r, keys)] if keys else []),
             *[_text(*_at(r, c)) for c in cols]] for r in rows]
    head = ["model", "n", *(["settings"] if keys else []), *cols]
    gains = sorted({(c, card["control"]) for r in rows if "validity" in r for c, card in r["validity"].items()})
    for cond, control in gains:  # personalization gain: a condition minus its wrong-user control, in points
        head.append(f"gain: {cond} - {control}")
        for r, line in zip(rows, body):
            cards = r["validity"] if "validity" in r else {}  # noqa: SIM401 (no .get in readers: test_typed_reads)
            g = cards[cond]["gain"] if cond in cards else None
            line.append("-" if not g else f"{100 * g['diff']:+.1f} [{100 * g['ci_low']:.1f}, "
                                          f"{100 * g['ci_high']:.1f}] p={g['p_value']:.2g}")
    if any("resolvable" in r for r in rows):  # 80% power at level 0.05 against a fixed value (prbench.power)
        head.append("resolves (pts)")
        for r, line in zip(rows, body):
            v = sorted(r["resolvable"].values()) if "resolvable" in r else []
            line.append("-" if not v else f"{100 * v[0]:.1f}" if v[0] == v[-1] else f"{100 * v[0]:.1f}-{100 * v[-1]:.1f}")
    if any("usd" in r for r in rows):  # a cost column once any run spent API money
        head.append("$")
        for r, line in zip(rows, body):
            line.append(f"{r['usd']:.2f}" if "usd" in r else "-")
    return head, body


def _gain_cell(cards: dict[str, Any]) -> str:
    parts = []
    for cond, card in sorted(cards.items()):
        g = card["gain"]  # a ValidityCard's dump: every field present
        if g:
            parts.append(f"{cond} - {card['control']} {100 * g['diff']:+.1f} "
                         f"[{100 * g['ci_low']:.1f}, {100 * g['ci_high']:.1f}] p={g['p_value']:.2g}")
    return "; ".join(parts) or "-"


def wrap_name(name: str, width: int = 20) -> str:
    """A model name in lines of at most `width` where it can break after ':' or '/', so a narrow terminal
    wraps it there and never mid-word ("baseline:embeddi / ng"); a part longer than `width` stays whole."""
    parts = re.findall(r"[^:/]+[:/]?|[:/]", name)
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def render_tables(rows: Sequence[dict[str, Any]], with_categories: bool = False
                  ) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, head, body) per data set, so numbers of different benchmarks never share a column.

    With categories, a long table follows each (model, category, accuracy per condition): as many
    columns as conditions, never condition x category, so it reads at 100 columns.
    """
    out = []
    for data in dict.fromkeys(r["data"] for r in rows):
        group = [r for r in rows if r["data"] == data]
        head, body = render_rows(group)
        body = [[wrap_name(row[0]), *(c.replace(" [", "\n[") for c in row[1:])] for row in body]  # CI under
        out.append((f"{data}: accuracy % [95% CI]", head, body))
        if with_categories and any("/" in k for r in group for k in r["cells"]):
            out.append((f"{data}: accuracy % by category", *_category_rows(group)))
    return out


def _category_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    cols = columns(rows)
    conds = [c for c in cols if "/" not in c]
    cats = list(dict.fromkeys(c.split("/", 1)[1] for c in cols if "/" in c))
    body = []
    for r in rows:
        first = True
        for cat in cats:
            accs = [_at(r, f"{c}/{cat}")[0] for c in conds]
            if all(a is None for a in accs):
                continue
            body.append([_name(r) if first else "", cat,
                         *["-" if a is None else f"{100 * a:.1f}" for a in accs]])
            first = False
    return ["model", "category", *conds], body


def compare_runs(path_a: str | Path, path_b: str | Path, seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Paired difference A - B on the items both runs scored validly, with bootstrap CI and McNemar."""
    from prbench.runkinds.eval import KIND as EVAL

    run_a, run_b = load_run(path_a), load_run(path_b)
    sa, sb = run_a.summary_as(EvalSummary), run_b.summary_as(EvalSummary)
    a, b = EVAL.credits(run_a), EVAL.credits(run_b)
    shared = sorted(a.keys() & b.keys())
    if not shared:
        raise PrbenchError("the two runs share no validly scored item")
    res = metrics.paired_comparison(np.array([a[i] for i in shared]), np.array([b[i] for i in shared]),
                                    seed=seed, n_boot=n_boot)
    return {"a": {"model": sa.model, "condition": sa.condition, "path": str(path_a)},
            "b": {"model": sb.model, "condition": sb.condition, "path": str(path_b)},
            "n_shared": len(shared), "only_a": len(a.keys() - b.keys()), "only_b": len(b.keys() - a.keys()),
            **res}
