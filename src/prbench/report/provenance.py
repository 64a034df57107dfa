"""The report's provenance section: versions, seeds, fingerprints, run folders of every kind."""

from __future__ import annotations

import datetime as _dt
import json
import platform
from collections.abc import Mapping
from typing import Any

from prbench import __version__
from prbench.context.conditions import CONDITIONS
from prbench.meta.result import MetaResult
from prbench.report.data import ReportData, ev
from prbench.report.widgets import (
    Cell,
    empty,
    esc,
    fnum,
    is_baseline,
    model_cell,
    numc,
    rel,
    section,
    table,
    text,
)
from prbench.store.cache import content_key
from prbench.store.records import PolicyAccuracySummary


def _hashes(obj: Any, prefix: str = "", inside: bool = False) -> dict[str, str]:
    """Every value under a key that names a hash, template or sha in a run's model_info, flattened."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            name = f"{prefix}{k}"
            hit = inside or any(t in str(k).lower() for t in ("hash", "template", "sha"))
            if isinstance(v, (Mapping, list)):
                out.update(_hashes(v, name + ".", hit))
            elif hit and v is not None:
                out[name] = str(v)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(_hashes(v, f"{prefix}{i}.", inside))
    return out


def provenance_section(d: ReportData, meta: MetaResult | None, seed: int, n_boot: int) -> str:
    explain = ("Where every number came from: software versions, seeds, model fingerprints, prompt and chat-template "
               "hashes, wall time and the run folder (relative to the runs folder). Re-running the same config "
               "reproduces the same per-example records.")
    body = [table(["", "value"], [
        ["report generated", text(_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))],
        ["prbench", text(__version__)], ["python", text(platform.python_version())],
        ["runs folder", Cell(esc(str(d.root.resolve())), "path")],
        ["report bootstrap", text(f"{n_boot} resamples, seed {seed} (category CIs, paired differences)")],
    ])]
    if d.evals:
        software: dict[str, int] = {}
        for r in d.evals:
            v = ev(r).versions
            label = ", ".join(f"{k} {val}" for k, val in sorted(v.items()) if val) or "unknown"
            software[label] = software.get(label, 0) + 1
        body.append("<h3>Software</h3>" + table(["versions", Cell("eval runs", "num")],
                                                [[text(k), numc(fnum(n))] for k, n in sorted(software.items())]))
        head = ["model", "fingerprint", "prompt / template hashes", "condition", "data", Cell("seed", "num"),
                Cell("wall s", "num"), "run folder"]
        rows, classes = [], []
        cond_rank = {c: i for i, c in enumerate(CONDITIONS)}
        ordered = sorted(d.evals, key=lambda r: (r.key, r.data, cond_rank.get(r.condition, 99), r.condition))
        span = {k: sum(1 for r in d.evals if r.key == k) for k in {r.key for r in d.evals}}
        seen: set[str] = set()
        for r in ordered:
            s = ev(r)
            info = s.model_info
            row: list[Cell | str] = []
            if r.key not in seen:
                seen.add(r.key)
                hs = _hashes(info)
                fp = info.get("fingerprint", info)  # model_info: free-form per RM kind
                row += [model_cell(r.key, is_baseline(r), rowspan=span[r.key]),
                        Cell(esc(content_key(fp)[:12]), "hash", json.dumps(fp, default=str)[:400], rowspan=span[r.key]),
                        Cell("<br>".join(f"{esc(k)}: {esc(val[:16])}" for k, val in sorted(hs.items())) or "–",
                             "hash", rowspan=span[r.key])]
            row += [text(r.condition, "nowrap"), text(r.data), numc(fnum(s.seed)),
                    numc(fnum(s.wall_time_s, 1)), Cell(esc(rel(r.path, d.root)), "path")]
            rows.append(row)
            classes.append("baseline" if is_baseline(r) else "")
        body.append("<h3>Eval runs</h3>" + table(head, rows, row_classes=classes,
                                                 caption="fingerprint: hash of the RM's identity (spec, weights "
                                                         "revision, template); hover for the full fingerprint"))
    else:
        body.append(empty("No eval runs."))
    if d.downstream:
        head = ["RM", "setting", "grader", Cell("seed", "num"), Cell("items", "num"), "fingerprint", "file"]
        rows = [[model_cell(r.rm), text(r.setting), text(r.grader), numc(fnum(r.seed)),
                 numc(fnum(r.n_items)), Cell(esc(content_key(r.rm_fingerprint)[:12]) if r.rm_fingerprint else "–",
                                             "hash"),
                 Cell(esc(rel(f, d.root)), "path")] for f, r in d.downstream]
        body.append("<h3>Downstream results</h3>" + table(head, rows))
    if d.policy_accuracy:
        head = ["RM", "policy", "condition", Cell("seed", "num"), Cell("wall s", "num"), "run folder"]
        pas = [(r, r.summary_as(PolicyAccuracySummary)) for r in d.policy_accuracy]
        rows = [[model_cell(s.rm or "(plain policy)"), text(s.policy), text(s.condition), numc(fnum(s.seed)),
                 numc(fnum(s.wall_time_s, 1)), Cell(esc(rel(r.path, d.root)), "path")] for r, s in pas]
        body.append("<h3>Policy-accuracy runs</h3>" + table(head, rows))
    if d.builds:
        rows = [[Cell(esc(rel(p, d.root)), "path"), text(rep.rule_text or "–")] for p, rep in d.builds]
        body.append("<h3>Build reports</h3>" + table(["file", "filter rule"], rows))
    if meta:
        body.append("<h3>Meta-evaluation parameters</h3>" + table(
            ["parameter", "value"], [[text(k), Cell(esc(json.dumps(v, default=str)), "hash")]
                                     for k, v in meta.parameters.model_dump().items()]))
    if d.notes:
        body.append("<ul>" + "".join(f'<li class="note">{esc(n)}</li>' for n in d.notes) + "</ul>")
    return section("provenance", "Provenance", explain, "".join(body))
