"""One self-contained HTML report over a runs folder: tables, plots, meta-evaluation, provenance.

Why one file: a report gets mailed, attached and archived; it must open offline, years later,
without the runs folder. So CSS is inline, figures are base64 PNG data URIs, and no URL points
outside the file. Everything that comes from data (model names, prompts, paths) is HTML-escaped.

Every section keeps its id (`leaderboard`, `conditions`, `diagnostics`, `build`, `bon`, `rl-rgd`,
`meta`, `published`, `provenance`) and says briefly when it has no data, so links and scripts
that look for a section never break.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench import __version__, metrics
from prbench.cache import content_key
from prbench.conditions import CONDITIONS
from prbench.downstream.results import DownstreamResult, find_downstream, read_downstream
from prbench.errors import PrbenchError
from prbench.meta import (
    PAPER_COLUMNS,
    EvalRun,
    is_policy_accuracy_summary,
    load_eval_runs,
    main_rows,
    meta_evaluate,
)
from prbench.report import plots
from prbench.rewards.base import capabilities
from prbench.runs import read_json
from prbench.schema import CATEGORIES, CATEGORY_SHORT, normalize_category

SECTIONS: tuple[tuple[str, str], ...] = (
    ("leaderboard", "Leaderboard"),
    ("conditions", "Input conditions"),
    ("diagnostics", "Diagnostics"),
    ("build", "Benchmark build"),
    ("bon", "Best-of-N"),
    ("rl-rgd", "RL, RGD and policy accuracy"),
    ("meta", "Meta-evaluation"),
    ("published", "Published numbers"),
    ("provenance", "Provenance"),
)
CONDITION_HELP = {
    "none": "question only",
    "profile": "question + retrieved profile posts",
    "planner": "question + planner-written expected aspects",
    "oracle": "question + the true rubric aspects (upper bound)",
    "wrong-profile": "question + another user's posts (control)",
}
_OVERALL_KEYS = {"all", "overall", "micro", "mean", "avg", "average"}


# --------------------------------------------------------------------------- HTML helpers


def esc(value: Any) -> str:
    """Escape text from data for HTML bodies and attributes (quotes included)."""
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class Cell:
    """A table cell: already-escaped HTML plus CSS classes and an optional tooltip."""

    html: str
    cls: str = ""
    title: str = ""
    rowspan: int = 1

    def render(self, tag: str = "td") -> str:
        attrs = (f' class="{esc(self.cls)}"' if self.cls else "") + (f' title="{esc(self.title)}"' if self.title else "")
        if self.rowspan > 1:
            attrs += f' rowspan="{int(self.rowspan)}"'
        return f"<{tag}{attrs}>{self.html}</{tag}>"


def text(value: Any, cls: str = "", title: str = "") -> Cell:
    return Cell(esc(value), cls, title)


def numc(value: str, title: str = "", extra: str = "") -> Cell:
    return Cell(value, ("num " + extra).strip(), title)


def table(head: Sequence[str | Cell], rows: Iterable[Sequence[Cell | str]], *, row_classes: Sequence[str] | None = None,
          caption: str = "", cls: str = "") -> str:
    """An HTML table; plain strings are escaped, Cells are trusted HTML built with `esc`."""
    def cell(c: Cell | str, tag: str) -> str:
        return (c if isinstance(c, Cell) else text(c)).render(tag)

    out = [f'<div class="scroll"><table class="{esc(cls)}">' if cls else '<div class="scroll"><table>']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(cell(h, "th") for h in head) + "</tr></thead><tbody>")
    for i, r in enumerate(rows):
        cls = row_classes[i] if row_classes and i < len(row_classes) else ""
        out.append((f'<tr class="{esc(cls)}">' if cls else "<tr>") + "".join(cell(c, "td") for c in r) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def figure(png: bytes | None, alt: str, caption: str = "") -> str:
    """An <img> with the PNG inline as a data URI (or a note when matplotlib is missing)."""
    if png is None:
        return ('<p class="empty">Plot not drawn: matplotlib is not installed '
                "(<code>pip install prbench[report]</code>); the table holds the same numbers.</p>"
                if not plots.available() else "")
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def empty(message: str) -> str:
    return f'<p class="empty">{esc(message)}</p>'


def pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{100 * v:.{digits}f}"


def acc_cell(v: float | None, lo: float | None, hi: float | None, *, title: str = "", best: bool = False,
             inline: bool = False) -> Cell:
    """Accuracy % with its CI under it (or beside it), right aligned."""
    if v is None:
        return numc("–", title)
    ci = ""
    if lo is not None and hi is not None:
        ci = (f'<span class="inline-ci">[{pct(lo)}, {pct(hi)}]</span>' if inline
              else f'<span class="ci">[{pct(lo)}, {pct(hi)}]</span>')
    return numc(f"{pct(v)}{ci}", title, "best" if best else "")


def fnum(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    try:
        return f"{float(v):.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def signed_pp(v: float | None) -> str:
    """A difference in percentage points, coloured by sign."""
    if v is None:
        return "–"
    cls = "pos" if v > 0 else ("neg" if v < 0 else "")
    return f'<span class="{cls}">{100 * v:+.1f}</span>'


def is_baseline(run: EvalRun) -> bool:
    """A control row: read from the run's recorded capabilities (runs before they were recorded: its kind)."""
    caps = run.summary.get("capabilities")
    return bool(caps["is_control"]) if caps else is_control_spec(run.key)


def is_control_spec(spec: str) -> bool:
    """Whether the RM kind a spec names is a control, from its class; unknown kinds are not."""
    try:
        return capabilities(str(spec)).is_control
    except PrbenchError:
        return False


def model_cell(name: str, baseline: bool = False, reference: str = "", rowspan: int = 1) -> Cell:
    badge = '<span class="badge baseline">baseline</span>' if baseline else ""
    if reference:
        badge += f'<span class="badge ref">{esc(reference)}</span>'
    return Cell(esc(name) + badge, "model", rowspan=rowspan)


def cat_label(cat: str) -> str:
    return CATEGORY_SHORT.get(cat, cat)


def rel(path: Any, root: Path) -> str:
    """A path relative to the runs folder when it lies inside, else as given."""
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(path)


# --------------------------------------------------------------------------- data


@dataclass
class ReportData:
    """Everything found under the runs folder, read once."""

    root: Path
    evals: list[EvalRun]
    downstream: list[tuple[Path, DownstreamResult]]
    policy_accuracy: list[tuple[Path, dict[str, Any], list[dict[str, Any]]]]
    builds: list[tuple[Path, dict[str, Any]]]
    notes: list[str] = field(default_factory=list)

    def by_data(self) -> dict[str, list[EvalRun]]:
        out: dict[str, list[EvalRun]] = {}
        for r in self.evals:
            out.setdefault(r.data, []).append(r)
        return dict(sorted(out.items()))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def is_build_report(obj: Any) -> bool:
    """The build pipeline's validation report (build/report.py): rule, per-category sections and 'all'."""
    return isinstance(obj, dict) and "rule" in obj and isinstance(obj.get("categories"), dict) and "all" in obj


def collect(root: str | Path) -> ReportData:
    """Read eval runs, downstream results, policy-accuracy runs and build reports under `root`."""
    base = Path(root)
    if not base.is_dir():
        raise PrbenchError(f"{base}: not a folder")
    notes: list[str] = []
    evals = load_eval_runs([base])
    downstream = []
    for f in find_downstream(base):
        try:
            downstream.append((f, read_downstream(f)))
        except PrbenchError as exc:
            notes.append(f"skipped {rel(f, base)}: {exc}")
    pa = []
    for sp in sorted(base.rglob("summary.json")):
        try:
            s = read_json(sp)
        except ValueError:
            continue
        if is_policy_accuracy_summary(s):
            pa.append((sp.parent, s, _jsonl(sp.parent / "examples.jsonl")))
    builds = []
    for rp in sorted(base.rglob("report.json")):
        try:
            obj = read_json(rp)
        except ValueError:
            continue
        if is_build_report(obj):
            builds.append((rp, obj))
    return ReportData(base, evals, downstream, pa, builds, notes)


def _category_stats(run: EvalRun, seed: int, n_boot: int) -> dict[str, dict[str, Any]]:
    """Accuracy with bootstrap CI per category, recomputed from the run's records (summaries hold no category CI)."""
    by: dict[str, list[float]] = {}
    for r in run.records:
        if r.get("credit") is not None:
            by.setdefault(str(r.get("category", "?")), []).append(float(r["credit"]))
    return {c: metrics.accuracy_summary(np.array(v), seed=seed, n_boot=n_boot) for c, v in sorted(by.items())}


def _credits(run: EvalRun) -> dict[str, float]:
    return {str(r["id"]): float(r["credit"]) for r in run.records if r.get("credit") is not None}


def _conditions_of(runs: Sequence[EvalRun]) -> list[str]:
    present = {r.condition for r in runs}
    return [c for c in CONDITIONS if c in present] + sorted(present - set(CONDITIONS))


def _model_order(runs: Sequence[EvalRun]) -> list[str]:
    """Models by their best accuracy over conditions, best first (baselines sorted in, but marked)."""
    best: dict[str, float] = {}
    for r in runs:
        a = r.summary["metrics"].get("accuracy")
        best[r.key] = max(best.get(r.key, -1.0), -1.0 if a is None else a)
    return sorted(best, key=lambda m: (-best[m], m))


# --------------------------------------------------------------------------- sections


def section(sid: str, title: str, explain: str, body: str) -> str:
    return (f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>'
            f'<p class="explain">{explain}</p>{body}</section>')


def leaderboard_section(d: ReportData, seed: int, n_boot: int) -> str:
    explain = ("Accuracy (%) = share of preference pairs where the RM prefers the user's <em>chosen</em> answer; "
               "an exact tie counts 0.5; invalid outputs are excluded and counted under Diagnostics. "
               "Small numbers: 95% percentile-bootstrap CI over items. Baselines (length, random, lexical, ...) "
               "are marked and greyed; 50% is chance. Bold: best non-baseline model per column.")
    if not d.evals:
        return section("leaderboard", "Leaderboard", explain, empty("No eval runs found. Run `prbench eval` first."))
    body = []
    for data, runs in d.by_data().items():
        conds = _conditions_of(runs)
        models = _model_order(runs)
        cell = {(r.key, r.condition): r for r in runs}
        base = {r.key: is_baseline(r) for r in runs}
        n_pairs = sorted({r.summary["metrics"].get("n_total", r.summary.get("n_total")) for r in runs} - {None})
        body.append(f"<h3>Data: {esc(data)}</h3>")
        best_per_cond = {}
        for c in conds:
            vals = [(cell[(m, c)].summary["metrics"]["accuracy"], m) for m in models
                    if (m, c) in cell and not base[m] and cell[(m, c)].summary["metrics"]["accuracy"] is not None]
            best_per_cond[c] = max(vals)[1] if vals else None
        head = ["model", *[Cell(f'{esc(c)}', "num", CONDITION_HELP.get(c, "")) for c in conds]]
        rows = []
        for m in models:
            row: list[Cell | str] = [model_cell(m, base[m])]
            for c in conds:
                r = cell.get((m, c))
                if r is None:
                    row.append(numc("–"))
                    continue
                mm = r.summary["metrics"]
                tip = f"n = {mm.get('n')} valid of {mm.get('n_total')}; invalid {mm.get('n_invalid', 0)}"
                row.append(acc_cell(mm.get("accuracy"), mm.get("ci_low"), mm.get("ci_high"), title=tip,
                                    best=best_per_cond.get(c) == m))
            rows.append(row)
        cap = "pairs per run: " + ", ".join(str(n) for n in n_pairs) if n_pairs else ""
        body.append(table(head, rows, row_classes=["baseline" if base[m] else "" for m in models], caption=cap))
        # by category: one row per (model, condition), the model cell spanning its conditions
        stats = {(r.key, r.condition): _category_stats(r, seed, n_boot) for r in runs}
        cats = sorted({k for st in stats.values() for k in st}, key=lambda k: (k not in CATEGORIES, k))
        head = ["model", "condition", Cell("all (micro)", "num"), Cell("macro", "num"),
                *[Cell(esc(cat_label(k)), "num", k) for k in cats]]
        rows, classes = [], []
        for m in models:
            mine = [c for c in conds if (m, c) in cell]
            for j, c in enumerate(mine):
                mm = cell[(m, c)].summary["metrics"]
                macro = (mm.get("categories") or {}).get("macro") or {}
                row: list[Cell | str] = [model_cell(m, base[m], rowspan=len(mine))] if j == 0 else []
                row += [Cell(esc(c), "nowrap", CONDITION_HELP.get(c, "")),
                        acc_cell(mm.get("accuracy"), mm.get("ci_low"), mm.get("ci_high"), inline=True),
                        acc_cell(macro.get("accuracy"), macro.get("ci_low"), macro.get("ci_high"), inline=True)]
                for k in cats:
                    st = stats[(m, c)].get(k)
                    row.append(acc_cell(st["accuracy"], st["ci_low"], st["ci_high"], title=f"n = {st['n']}",
                                        inline=True) if st else numc("–"))
                rows.append(row)
                classes.append("baseline" if base[m] else "")
        body.append("<details open><summary>By category (macro = unweighted mean of category accuracies, CI "
                    "stratified by category; category CIs recomputed from the per-item records)</summary>"
                    + table(head, rows, row_classes=classes, cls="compact") + "</details>")
    return section("leaderboard", "Leaderboard", explain, "".join(body))


def conditions_section(d: ReportData, seed: int, n_boot: int) -> str:
    explain = ("What the RM sees: <b>none</b> (question only), <b>profile</b> (retrieved posts of this user), "
               "<b>planner</b> (aspects a planner inferred from the profile), <b>oracle</b> (the true rubric: an upper "
               "bound) and <b>wrong-profile</b> (another user's posts: a control; a gain that also shows up here is "
               "not personalization). Whiskers: 95% bootstrap CI. Differences in percentage points with a paired "
               "bootstrap 95% CI over the items both runs scored.")
    if not d.evals:
        return section("conditions", "Input conditions", explain, empty("No eval runs found."))
    body = []
    for data, runs in d.by_data().items():
        conds = _conditions_of(runs)
        models = _model_order(runs)
        cell = {(r.key, r.condition): r for r in runs}
        vals = {(m, c): (r.summary["metrics"].get("accuracy"), r.summary["metrics"].get("ci_low"),
                         r.summary["metrics"].get("ci_high")) for (m, c), r in cell.items()}
        vals = {k: tuple(None if x is None else 100 * x for x in v) for k, v in vals.items()}
        png = plots.grouped_bars(models, conds, vals, ylabel="accuracy (%)", chance=50.0,
                                 colors=plots.CONDITION_COLORS)
        body.append(f"<h3>Data: {esc(data)}</h3>")
        body.append(figure(png, f"accuracy per model and condition on {data}",
                            "Accuracy per RM under each input condition; dashed line: chance (50%)."))
        pairs = [(c, "none") for c in ("profile", "planner", "oracle", "wrong-profile") if c in conds and "none" in conds]
        if "profile" in conds and "wrong-profile" in conds:
            pairs.append(("profile", "wrong-profile"))
        if not pairs:
            body.append(empty("Paired differences need the 'none' condition and at least one other condition."))
            continue
        head = ["model", *[Cell(f"{esc(a)} − {esc(b)}", "num") for a, b in pairs]]
        rows = []
        for m in models:
            row: list[Cell | str] = [model_cell(m, any(is_baseline(r) for r in runs if r.key == m))]
            for a, b in pairs:
                ra, rb = cell.get((m, a)), cell.get((m, b))
                if ra is None or rb is None:
                    row.append(numc("–"))
                    continue
                ca, cb = _credits(ra), _credits(rb)
                shared = sorted(ca.keys() & cb.keys())
                if not shared:
                    row.append(numc("–"))
                    continue
                res = metrics.paired_comparison(np.array([ca[i] for i in shared]), np.array([cb[i] for i in shared]),
                                                seed=seed, n_boot=n_boot)
                ci = ("" if res["ci_low"] is None else
                      f'<span class="ci">[{100 * res["ci_low"]:+.1f}, {100 * res["ci_high"]:+.1f}]</span>')
                row.append(numc(signed_pp(res["diff"]) + ci,
                                f"n = {res['n']} shared items; McNemar p = {res['mcnemar_p']:.3g}"))
            rows.append(row)
        body.append(table(head, rows, row_classes=["baseline" if any(is_baseline(r) for r in runs if r.key == m)
                                                   else "" for m in models],
                          caption="accuracy difference (percentage points), paired over shared items"))
    return section("conditions", "Input conditions", explain, "".join(body))


def diagnostics_section(d: ReportData) -> str:
    explain = ("Controls beside every number. <b>Prefers longer</b>: among decisive pairs whose answers differ in length, "
               "the share where the RM picked the longer one (50% = no length bias). <b>Acc chosen=A / =B</b>: accuracy "
               "when the chosen answer was shown first / second (pairwise judges; a gap is position bias); <b>says A</b>: "
               "share of verdicts for the first answer. <b>Invalid</b>: "
               "unparseable verdicts or failed scores, excluded from accuracy and never guessed. <b>Truncated</b>: "
               "inputs cut to fit the model's context.")
    if not d.evals:
        return section("diagnostics", "Diagnostics", explain, empty("No eval runs found."))
    body = []
    for data, runs in d.by_data().items():
        rec = next((r.records for r in runs if r.records), [])
        longer = [r.get("longer") for r in rec]
        if longer:
            share = sum(1 for x in longer if x == "chosen") / len(longer)
            body.append(f"<h3>Data: {esc(data)}</h3><p class=\"explain\">The chosen answer is the longer one in "
                        f"<b>{100 * share:.1f}%</b> of {len(longer)} pairs (so a length-only RM scores about that).</p>")
        else:
            body.append(f"<h3>Data: {esc(data)}</h3>")
        any_pairwise = any("pairwise" in r.summary["metrics"] for r in runs)
        any_margin = any(r.summary["metrics"].get("mean_margin") is not None for r in runs)
        head = ["model", "condition", Cell("n", "num"), Cell("invalid", "num"), Cell("truncated", "num"),
                Cell("ties", "num"), Cell("prefers longer", "num")]
        if any_margin:
            head.append(Cell("mean margin", "num", "mean score(chosen) - score(rejected), RM units"))
        if any_pairwise:
            head += [Cell("acc chosen=A / =B", "num", "accuracy when chosen was shown as A / as B"),
                     Cell("says A", "num", "share of A verdicts among A/B verdicts"),
                     Cell("parse failures", "num"), Cell("consistent", "num", "same side in both orders (--both-orders)")]
        rows, classes = [], []
        order = {m: i for i, m in enumerate(_model_order(runs))}
        conds = _conditions_of(runs)
        ordered = sorted(runs, key=lambda r: (order[r.key], conds.index(r.condition)))
        span = {m: sum(1 for r in runs if r.key == m) for m in order}
        seen: set[str] = set()
        for r in ordered:
            m = r.summary["metrics"]
            lb = m.get("length_bias") or {}
            pw = m.get("pairwise") or {}
            inv = m.get("n_invalid", 0) or 0
            pl = lb.get("prefers_longer")
            pl_cls = "warn" if pl is not None and abs(pl - 0.5) > 0.2 else ""
            gap = (pw.get("accuracy_chosen_A") is not None and pw.get("accuracy_chosen_B") is not None
                   and abs(pw["accuracy_chosen_A"] - pw["accuracy_chosen_B"]) > 0.1)
            row: list[Cell | str] = []
            if r.key not in seen:
                row.append(model_cell(r.key, is_baseline(r), rowspan=span[r.key]))
                seen.add(r.key)
            row += [text(r.condition, "nowrap"), numc(fnum(m.get("n_total", m.get("n")))),
                    numc(f'<span class="warn">{inv}</span>' if inv else "0"), numc(fnum(m.get("truncated_inputs"))),
                    numc(fnum(m.get("ties"))),
                    numc((f'<span class="{pl_cls}">{pct(pl)}</span>' if pl is not None else "–")
                         + (f'<span class="inline-ci">n={lb.get("n")}</span>' if lb.get("n") is not None else ""))]
            if any_margin:
                row.append(numc(fnum(m.get("mean_margin"), 4)))
            if any_pairwise:
                ab = (f'{pct(pw.get("accuracy_chosen_A"))} / {pct(pw.get("accuracy_chosen_B"))}'
                      if pw else "–")
                row += [numc(f'<span class="warn">{ab}</span>' if gap else ab),
                        numc(pct(pw.get("share_verdict_A"))), numc(fnum(pw.get("parse_failures"))),
                        numc(pct(pw.get("position_consistency")))]
            rows.append(row)
            classes.append("baseline" if is_baseline(r) else "")
        body.append(table(head, rows, row_classes=classes,
                          caption="percentages except n, counts and margin (score units); – = not applicable; "
                                  "highlighted: length preference beyond 30/70% or an A/B accuracy gap over 10 points"))
        body.extend(_validity_panel(r) for r in ordered if r.summary.get("validity"))
    return section("diagnostics", "Diagnostics", explain, "".join(body))


def _validity_panel(r: Any) -> str:
    """One run's personalization validity card (prbench.validity): gain over its wrong-user control, controls."""
    v = r.summary["validity"]
    g, ln, pos = v.get("gain") or {}, v.get("length") or {}, v.get("position") or {}
    gain = (f"gain over <code>{esc(v['control'])}</code>: <b>{100 * g['diff']:+.1f}</b> points "
            f"[{100 * g['ci_low']:.1f}, {100 * g['ci_high']:.1f}], p = {g['p_value']:.2g} (n = {v['n_shared']})"
            if g else "no item shared with the control")
    length = f"prefers longer {pct(ln.get('prefers_longer'))} (p = {fnum(ln.get('p_value'), 3)})"
    position = (f"says A {pct(pos.get('share_A'))} (p = {fnum(pos.get('p_value'), 3)})" if pos.get("applicable")
                else "position: n/a (pointwise)")
    return (f"<p class=\"explain\">Validity, {esc(r.key)} [{esc(v['condition'])}]: {gain}; {length}; {position}; "
            f"scored with context {pct(v.get('context_share'))}.</p>")


def build_section(d: ReportData) -> str:
    explain = ("The benchmark build's validation: a validator LLM scored every chosen and rejected answer 1-5 on "
               "factuality, relevance, helpfulness and rubric (personal) fit. A good pair is close on the first three "
               "and far apart on rubric fit. Cells: mean (min-max) over kept pairs.")
    if not d.builds:
        return section("build", "Benchmark build", explain,
                       empty("No build report (report.json from `prbench build`) under this folder."))
    body = []
    for path, rep in d.builds:
        secs = {**rep.get("categories", {}), "all": rep.get("all", {})}
        body.append(f"<h3>{esc(rel(path, d.root))}</h3>")
        if rep.get("rule_text"):
            body.append(f'<p class="explain">Filter: {esc(rep["rule_text"])}</p>')
        scales: list[str] = []
        for s in secs.values():
            scales.extend(k for k in (s.get("scales_kept") or {}) if k not in scales)
        order = ("factuality", "relevance", "helpfulness", "rubric_fit")
        scales.sort(key=lambda k: (order.index(k) if k in order else len(order), k))
        head = ["dimension", *[Cell(f"{esc(cat_label(c))} {part}", "num") for c in secs
                               for part in ("chosen", "rejected", "gap")]]
        rows = []
        for sc in scales:
            row: list[Cell | str] = [text(sc.replace("_", " "))]
            for s in secs.values():
                t = (s.get("scales_kept") or {}).get(sc) or {}
                for side in ("chosen", "rejected"):
                    v = t.get(side)
                    row.append(numc("–" if not v else f"{v['mean']:.2f}<span class=\"ci\">({v['min']:g}-{v['max']:g})</span>"))
                g = t.get("gap")
                row.append(numc("–" if g is None else f"<b>{g:+.2f}</b>" if sc == "rubric_fit" else f"{g:+.2f}"))
            rows.append(row)
        body.append(table(head, rows, caption="validator scores of kept pairs, 1-5"))
        head = ["", *[Cell(esc(cat_label(c)), "num") for c in secs]]
        rows = [["kept / processed", *[numc(f"{s.get('kept', 0)} / {s.get('processed', 0)}") for s in secs.values()]],
                ["dropped", *[numc(fnum(s.get("dropped"))) for s in secs.values()]]]
        reasons = sorted({k for s in secs.values() for k in (s.get("dropped_by_reason") or {})})
        for reason in reasons:
            rows.append([text(f"dropped: {reason}"), *[numc(fnum((s.get("dropped_by_reason") or {}).get(reason, 0)))
                                                        for s in secs.values()]])
        for label, get in (("chosen longer (kept)", lambda s: pct((s.get("length_kept") or {}).get("chosen_longer"))),
                           ("generation failed", lambda s: fnum((s.get("generation") or {}).get("failed"))),
                           ("validator parse failures", lambda s: fnum((s.get("validation") or {}).get("parse_failures")))):
            rows.append([text(label), *[numc(get(s)) for s in secs.values()]])
        body.append(table(head, rows, caption="pairs kept and dropped (first failing check)"))
    return section("build", "Benchmark build", explain, "".join(body))


def _bon_groups(d: ReportData) -> dict[tuple, list[tuple[Path, DownstreamResult]]]:
    groups: dict[tuple, list[tuple[Path, DownstreamResult]]] = {}
    for f, r in d.downstream:
        if r.setting == "bon":
            key = (r.extra.get("condition"), r.grader, str(r.extra.get("samples", "")), tuple(r.k))
            groups.setdefault(key, []).append((f, r))
    return groups


def bon_section(d: ReportData) -> str:
    explain = ("Best-of-N: a policy drew N answers per item; each RM picks its top-scored answer among k; the rubric "
               "grader scores the pick (per aspect 0 = not covered, 1 = partly, 2 = well; item score = mean). Values: "
               "exact expected grade over random k-subsets (no draw noise), mean over items; bands: 95% bootstrap CI "
               "over items. <b>Oracle</b> = grader's own best pick (ceiling); <b>random</b> = mean grade (floor).")
    groups = _bon_groups(d)
    if not groups:
        return section("bon", "Best-of-N", explain,
                       empty("No Best-of-N results (downstream.json with setting 'bon') under this folder."))
    body = []
    names = sorted({r.rm for ms in groups.values() for _, r in ms})
    palette = {n: plots.PALETTE[i % len(plots.PALETTE)] for i, n in enumerate(names)}
    for (cond, grader, _, ks), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        members = sorted(members, key=lambda fr: -fr[1].expected[-1])
        ref = max(members, key=lambda fr: fr[1].n_items)[1]
        oracle, rand = ref.extra.get("oracle"), ref.extra.get("random")
        curves = {r.rm: (r.expected, r.ci_low, r.ci_high) for _, r in members}
        body.append(f"<h3>RM condition: {esc(cond or '–')} · grader: {esc(grader)}</h3>")
        body.append(figure(plots.bon_curves(list(ks), curves, oracle=oracle, random=rand, ylabel=ref.scale,
                                            colors=palette),
                           "Best-of-N curves", f"{ref.scale}; mean over items with 95% CI band"))
        head = ["RM", Cell("items", "num"), *[Cell(f"k={k}", "num") for k in ks], Cell(f"first-k draw, k={ks[-1]}", "num")]
        rows, classes = [], []
        for _, r in members:
            cells = [numc(f'{v:.3f}<span class="ci">[{fnum(lo)}, {fnum(hi)}]</span>' if lo is not None
                          else f"{v:.3f}") for v, lo, hi in zip(r.expected, r.ci_low, r.ci_high)]
            rows.append([model_cell(r.rm, is_control_spec(r.rm)), numc(fnum(r.n_items)), *cells,
                         numc(f"{r.first_k[-1]:.3f}")])
            classes.append("baseline" if is_control_spec(r.rm) else "")
        for label, curve in (("oracle (ceiling)", oracle), ("random pick (floor)", rand)):
            if isinstance(curve, list) and len(curve) == len(ks):
                rows.append([model_cell(label, reference="reference"), numc(fnum(ref.n_items)),
                             *[numc(f"{v:.3f}") for v in curve], numc("–")])
                classes.append("reference")
        body.append(table(head, rows, row_classes=classes))
    return section("bon", "Best-of-N", explain, "".join(body))


def rl_rgd_section(d: ReportData) -> str:
    explain = ("RL: the policy trained with each RM as reward, then graded on held-out items. RGD (reward-guided "
               "decoding, ARGS-style): a frozen policy steered token by token by the RM, scored by rubric grade or "
               "gold-answer metric. Policy accuracy (paper B): share of benchmark pairs where the RGD-adapted policy "
               "gives the chosen answer a higher guided log-likelihood than the rejected one (ties 0.5); the plain "
               "policy's own preference is the reference. CIs: 95% bootstrap over items.")
    body = []
    for setting, title in (("rl", "RL fine-tuning"), ("rgd", "Reward-guided decoding")):
        res = [(f, r) for f, r in d.downstream if r.setting == setting]
        body.append(f"<h3>{title}</h3>")
        if not res:
            body.append(empty(f"No {setting.upper()} results (downstream.json with setting '{setting}')."))
            continue
        head = ["RM", "condition", "policy", *([Cell("w / k", "num", "reward weight / candidate tokens per step")]
                                               if setting == "rgd" else []), "metric / grader",
                Cell("score", "num"), Cell("items", "num")]
        if setting == "rgd":
            head += [Cell("tokens changed", "num", "share of decision points where guidance changed the policy's "
                                                   "greedy token"),
                     Cell("ROUGE-1", "num", "against the user's own answer, when items carry one")]
        rows, classes = [], []
        for f, r in sorted(res, key=lambda fr: -fr[1].expected[-1]):
            metric = r.extra.get("metric")
            rows.append([model_cell(r.rm, is_control_spec(r.rm)), text(r.extra.get("condition", "–")),
                         text(r.extra.get("policy", "–"), "nowrap"),
                         *([numc(f'{fnum(r.extra.get("w"), 2)} / {fnum(r.extra.get("candidates_k"))}')]
                           if setting == "rgd" else []),
                         text(f"{metric}: {r.grader}" if metric else r.grader),
                         numc(f"{r.expected[-1]:.3f}" + (f'<span class="ci">[{fnum(r.ci_low[-1])}, {fnum(r.ci_high[-1])}]'
                                                         "</span>" if r.ci_low[-1] is not None else "")),
                         numc(fnum(r.n_items))])
            if setting == "rgd":
                run_summary = _run_summary(f)
                rouge = (((run_summary.get("gold") or {}).get("metrics") or {}).get("rouge1") or {}).get("mean")
                rows[-1] += [numc(pct(run_summary.get("changed_share"))), numc(fnum(rouge))]
            classes.append("baseline" if is_control_spec(r.rm) else "")
        scales = sorted({r.scale for _, r in res})
        body.append(table(head, rows, row_classes=classes, caption="score: " + "; ".join(scales)
                          + " (mean over items, 95% bootstrap CI)"))
    body.append("<h3>Policy accuracy</h3>")
    if not d.policy_accuracy:
        body.append(empty("No policy-accuracy runs (`prbench policy-accuracy`) under this folder."))
    else:
        groups: dict[tuple, list[tuple[Path, dict, list]]] = {}
        plain: dict[tuple, list[tuple[Path, dict, list]]] = {}
        for item in d.policy_accuracy:
            s = item[1]
            if s.get("rm"):
                groups.setdefault(tuple(str(s.get(k)) for k in ("policy", "data", "condition", "w", "k", "mode")),
                                  []).append(item)
            else:  # the plain policy (w = 0) is the reference row of every group on its policy and data
                plain.setdefault((str(s.get("policy")), str(s.get("data"))), []).append(item)
        for pk, items in plain.items():
            if not any(g[:2] == pk for g in groups):
                first = items[0][1]
                groups[(*pk, str(first.get("condition")), str(first.get("w")), str(first.get("k")),
                        str(first.get("mode")))] = []
        for key in list(groups):
            groups[key] = groups[key] + plain.get(key[:2], [])[:1]
        for (policy, data, cond, w, k, mode), members in sorted(groups.items()):
            body.append(f"<h4>policy {esc(policy)} · RM condition {esc(cond)} · w={esc(w)} · k={esc(k)} · "
                        f"mode {esc(mode)}</h4>")
            head = ["RM", Cell("policy accuracy", "num"), Cell("length-normalised", "num"),
                    Cell("plain policy", "num"), Cell("RM's own accuracy", "num"), Cell("same as plain", "num"),
                    Cell("top-k coverage", "num"), Cell("pairs", "num")]
            rows, classes, bars = [], [], []
            plain_ref = None
            for path, s, _ in sorted(members, key=lambda m: (not m[1].get("rm"), -(m[1].get("policy_accuracy") or 0))):
                mm = s.get("metrics", {})
                tot = (mm.get("policy_accuracy") or {}).get("total") or {}
                nor = (mm.get("policy_accuracy") or {}).get("normalized") or {}
                plain = (mm.get("plain_policy_accuracy") or {}).get("total") or {}
                own = mm.get("rm_accuracy") or {}
                plain_ref = plain_ref if plain_ref is not None else plain.get("accuracy")
                name = s.get("rm") or "(no RM: plain policy)"
                rows.append([model_cell(name, is_control_spec(name), "" if s.get("rm") else "reference"),
                             acc_cell(tot.get("accuracy"), tot.get("ci_low"), tot.get("ci_high")),
                             acc_cell(nor.get("accuracy"), nor.get("ci_low"), nor.get("ci_high")),
                             acc_cell(plain.get("accuracy"), plain.get("ci_low"), plain.get("ci_high")),
                             acc_cell(own.get("accuracy"), own.get("ci_low"), own.get("ci_high")),
                             numc(pct((mm.get("agreement_with_plain") or {}).get("total"))),
                             numc(pct(mm.get("mean_topk_coverage"))), numc(fnum(mm.get("n")))])
                classes.append("reference" if not s.get("rm") else ("baseline" if is_control_spec(name) else ""))
                if s.get("rm"):
                    bars.append((str(name), tuple(None if v is None else 100 * v for v in
                                                  (tot.get("accuracy"), tot.get("ci_low"), tot.get("ci_high")))))
            body.append(figure(plots.hbars([b[0] for b in bars], [b[1] for b in bars], xlabel="policy accuracy (%)",
                                           reference=None if plain_ref is None else 100 * plain_ref,
                                           reference_label="plain policy"),
                               "policy accuracy per RM", "Guided policy accuracy per RM (95% CI); dashed: plain policy."))
            body.append(table(head, rows, row_classes=classes,
                              caption="accuracy % with 95% CI; 'same as plain' = share of pairs where guidance did "
                                      "not change the policy's preference"))
    return section("rl-rgd", "RL, RGD and policy accuracy", explain, "".join(body))


def _run_summary(downstream_file: Path) -> dict[str, Any]:
    """The summary.json beside a downstream.json (RGD writes both in its run folder); {} if absent."""
    path = downstream_file.parent / "summary.json"
    try:
        obj = read_json(path) if path.exists() else {}
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _p_span(p: float | None) -> str:
    return "" if p is None else f'<span class="p">p = {p:.3f}</span>'


def meta_section(d: ReportData, meta: Mapping[str, Any] | None, meta_error: str | None) -> str:
    explain = ("Do benchmark rankings predict downstream rankings? Over the RMs present on both sides: NDCG (ranking "
               "by benchmark, gain = downstream score), weighted Kendall tau (top swaps count more), Spearman rho, "
               "rank-biased overlap (RBO) and Kendall tau-b, each with an item-bootstrap 95% CI and a one-sided "
               "permutation p-value. At least 3 RMs are needed. The paper reports NDCG 0.918 / weighted tau 0.341 / "
               "Spearman 0.257 for Best-of-N.")
    if meta_error:
        return section("meta", "Meta-evaluation", explain, empty(f"Meta-evaluation not computed: {meta_error}"))
    if not meta or not meta.get("rows"):
        why = ("needs eval runs and downstream results (downstream.json or policy-accuracy runs) for the same RMs; "
               f"looked under {d.root.resolve()} and found {len(d.downstream)} downstream.json and "
               f"{len(d.policy_accuracy)} policy-accuracy runs" if not meta else "; ".join(meta.get("notes") or ["no benchmark x downstream pairs"]))
        return section("meta", "Meta-evaluation", explain, empty(f"No meta-evaluation: {why}."))
    prm = meta["parameters"]
    rows = main_rows(meta)
    head = ["benchmark", "setting", Cell("RMs", "num"), *[Cell(esc(label), "num") for _, label in PAPER_COLUMNS],
            "resampling"]
    body_rows = []
    for r in rows:
        if r["metrics"] is None:
            body_rows.append([text(r["benchmark"]["label"], "nowrap"), text(r["setting"]["label"]), numc(fnum(r["n_rms"])),
                              Cell(f'<span class="warn">{esc(r["note"])}</span>', "", ""),
                              *[numc("") for _ in PAPER_COLUMNS[1:]], text("–")])
            continue
        cells = []
        for name, _ in PAPER_COLUMNS:
            m = r["metrics"][name]
            ci = (f'<span class="ci">[{m["ci_low"]:.2f}, {m["ci_high"]:.2f}]</span>'
                  if m["ci_low"] is not None else "")
            cells.append(numc(("–" if m["value"] is None else f'{m["value"]:.3f}') + ci + _p_span(m["p_value"])))
        body_rows.append([text(r["benchmark"]["label"], "nowrap"), text(r["setting"]["label"]), numc(fnum(r["n_rms"])),
                          *cells, Cell(esc(r.get("resampling")) + (f'<span class="ci">{r.get("n_items_benchmark")} / '
                                                                    f'{r.get("n_items_downstream")} items</span>'),
                                       "nowrap")])
    intro = (f'<p class="explain">Benchmark summary: <b>{esc(prm["summary"])}</b>; {prm["n_boot"]} bootstrap '
             f'resamples, {prm["n_perm"]} permutations, RBO p = {prm["p"]}, NDCG over '
             f'{"top " + str(prm["k"]) if prm["k"] else "all RMs"}, seed {prm["seed"]}. Best-of-N shown at its '
             "largest k (<code>prbench meta</code> gives every k). Small grey numbers: CI, then p-value.</p>")
    body = [intro, table(head, body_rows)]
    # scatter plots: one figure per downstream setting, one panel per benchmark
    names = sorted({rm for r in rows for rm in r["rms"]})
    palette = {n: plots.PALETTE[i % len(plots.PALETTE)] for i, n in enumerate(names)}
    by_setting: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["metrics"] is not None:
            by_setting.setdefault(r["setting"]["label"], []).append(r)
    for label, rs in by_setting.items():
        panels = []
        for r in rs:
            pts = {rm: (None if r["benchmark_scores"][rm] is None else
                        (100 * r["benchmark_scores"][rm] if prm["summary"] != "mean_margin" else r["benchmark_scores"][rm]),
                        r["downstream_scores"][rm]) for rm in r["rms"]}
            sp, kt = r["metrics"]["spearman"]["value"], r["metrics"]["kendall_tau_b"]["value"]
            panels.append({"title": r["benchmark"]["label"], "points": pts,
                           "subtitle": f"rho={fnum(sp, 2)}  tau={fnum(kt, 2)}"})
        xlabel = "benchmark accuracy (%)" if prm["summary"] != "mean_margin" else "mean margin"
        body.append(figure(plots.scatter_panels(panels, xlabel=xlabel, ylabel="downstream score", title=label,
                                                colors=palette),
                           f"benchmark vs downstream: {label}",
                           f"One point per RM: benchmark {prm['summary']} (x) vs {label} (y)."))
    if meta.get("cross_benchmark"):
        body.append(cross_benchmark_html(meta["cross_benchmark"]))
    if meta.get("paper_b"):
        head = ["RM accuracy from", "setting", Cell("RMs", "num"), Cell("Kendall tau-b", "num"), Cell("Spearman", "num")]
        prow = []
        for e in meta["paper_b"]:
            kt, sp = e.get("kendall_tau_b"), e.get("spearman")
            prow.append([text(e["benchmark"]), text(e["setting"]), numc(fnum(e["n_rms"])),
                         numc((f'{kt["value"]:.3f}' if kt and kt["value"] is not None else
                               esc(e.get("note") or ("undefined (constant scores)" if kt else "–")))
                              + (f'<span class="ci">[{kt["ci_low"]:.2f}, {kt["ci_high"]:.2f}]</span>'
                                 if kt and kt.get("ci_low") is not None else "") + _p_span((kt or {}).get("p_value"))),
                         numc(f'{sp["value"]:.3f}' if sp and sp.get("value") is not None else "–")])
        body.append("<h3>RM accuracy vs policy accuracy (paper B reports Kendall tau 0.08-0.31)</h3>" + table(head, prow))
    comp = meta.get("summary_comparison") or {}
    if comp.get("overall"):
        head = ["benchmark summary", Cell("mean Spearman", "num"), Cell("mean Kendall", "num"),
                Cell("common rows", "num"), Cell("rows with a value", "num"), Cell("best in rows", "num")]
        crow = []
        for name, v in comp["overall"].items():
            best = name == comp.get("best")
            crow.append([Cell(esc(name) + (' <span class="badge ref">best</span>' if best else ""), ""),
                         numc(fnum(v["mean_spearman"])), numc(fnum(v["mean_kendall_tau_b"])), numc(fnum(v["n_rows"])),
                         numc(fnum(v.get("n_rows_available"))), numc(fnum(v["best_in_rows"]))])
        body.append("<h3>Which benchmark summary predicts downstream best</h3>"
                    f'<p class="explain">{esc(comp.get("rule", ""))}. mean = accuracy; worst_category = each RM\'s '
                    "lowest category accuracy; mean_margin = mean score(chosen) − score(rejected), pointwise RMs "
                    "only.</p>" + table(head, crow))
    notes = [f'{r["benchmark"]["label"]} × {r["setting"]["label"]}: {r["note"]}' for r in meta["rows"] if r["note"]]
    notes += list(meta.get("notes") or [])
    if notes:
        body.append("<details><summary>Notes (" + str(len(notes)) + ")</summary><ul>"
                    + "".join(f'<li class="note">{esc(n)}</li>' for n in notes) + "</ul></details>")
    defs = meta.get("definitions") or {}
    body.append("<details><summary>Definitions and parameters</summary><dl class=\"defs\">"
                + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in defs.items())
                + "".join(f"<dt>parameter {esc(k)}</dt><dd>{esc(json.dumps(v, default=str))}</dd>"
                          for k, v in prm.items()) + "</dl></details>")
    return section("meta", "Meta-evaluation", explain, "".join(body))


def cross_benchmark_html(entries: Sequence[Mapping[str, Any]]) -> str:
    """Per downstream setting, every benchmark's rank agreement; the best per metric marked."""
    from prbench.meta import CROSS_LABELS, CROSS_METRICS

    parts = [("<h3 id=\"cross-benchmark\">Which benchmark ranks the RMs most like each downstream setting</h3>"
              '<p class="explain">One table per downstream setting compared with two or more benchmarks. '
              "<b>best</b> marks the highest value per metric; best overall is best on most metrics (ties: "
              "Spearman). Small grey numbers: CI, then permutation p-value.</p>")]
    for c in entries:
        head = ["benchmark", Cell("RMs", "num"), *[Cell(esc(CROSS_LABELS[m]), "num") for m in CROSS_METRICS]]
        body_rows = []
        for e in c["benchmarks"]:
            cells = []
            for m in CROSS_METRICS:
                v = (e["metrics"] or {}).get(m) or {}
                if v.get("value") is None:
                    cells.append(numc("–"))
                    continue
                ci = f'<span class="ci">[{v["ci_low"]:.2f}, {v["ci_high"]:.2f}]</span>' if v.get("ci_low") is not None \
                    else ""
                badge = ' <span class="badge ref">best</span>' if c["best"][m] == e["benchmark"] else ""
                cells.append(numc(f'{v["value"]:.3f}{badge}{ci}{_p_span(v.get("p_value"))}'))
            label = e["benchmark"] + (" (best overall)" if e["benchmark"] == c["best_overall"] else "")
            body_rows.append([text(label, "nowrap"), numc(fnum(e["n_rms"])), *cells])
        note = "" if c["same_rms"] else ' <span class="warn">(benchmarks compared over different RM sets)</span>'
        parts.append(f"<h4>{esc(c['setting'])}{note}</h4>" + table(head, body_rows))
    return "".join(parts)


def _published_rows(published: Mapping[str, Any]) -> list[tuple[str, str, str, float]]:
    """Flatten {spec: {condition: {category: acc %}}} into (spec, condition, category key, value)."""
    out = []
    if not isinstance(published, Mapping):
        raise PrbenchError("published numbers must be a JSON object {model_spec: {condition: {category: accuracy %}}}")
    for spec, conds in published.items():
        if not isinstance(conds, Mapping):
            raise PrbenchError(f"published[{spec!r}] must map conditions to {{category: accuracy %}}")
        for cond, cats in conds.items():
            if not isinstance(cats, Mapping):
                raise PrbenchError(f"published[{spec!r}][{cond!r}] must map categories to accuracy %")
            for cat, val in cats.items():
                if val is None:
                    continue
                out.append((str(spec), str(cond), str(cat), float(val)))
    return out


def published_section(d: ReportData, published: Mapping[str, Any] | None, seed: int, n_boot: int) -> str:
    explain = ("The papers' published accuracies (%) next to ours on the same model, condition and category. "
               "Difference = ours − published, in percentage points; <b>within CI</b>: the published value lies inside "
               "our 95% bootstrap CI. Expect gaps when the data differ (sample vs full benchmark) or prompts differ.")
    if not published:
        return section("published", "Published numbers", explain,
                       empty("No published numbers given (pass --published FILE.json)."))
    try:
        items = _published_rows(published)
    except (PrbenchError, TypeError, ValueError) as exc:
        return section("published", "Published numbers", explain, empty(f"Published numbers not usable: {exc}"))
    runs_by: dict[tuple[str, str], list[EvalRun]] = {}
    for r in d.evals:
        for a in r.aliases:
            runs_by.setdefault((a, r.condition), []).append(r)
    head = ["model", "condition", "category", Cell("published", "num"), Cell("ours", "num"), Cell("difference", "num"),
            Cell("within CI", "num"), "data"]
    rows = []
    cache: dict[int, dict[str, dict[str, Any]]] = {}
    for spec, cond, cat, val in items:
        runs = runs_by.get((spec, cond), [])
        if not runs:
            rows.append([text(spec), text(cond), text(cat), numc(f"{val:.2f}"), numc("not run"), numc("–"), numc("–"),
                         text("–")])
            continue
        for run in runs:
            if cat.strip().lower() in _OVERALL_KEYS:
                m = run.summary["metrics"]
                ours = {"accuracy": m.get("accuracy"), "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high")}
                cat_name = "all"
            else:
                full = normalize_category(cat)
                full = {v: k for k, v in CATEGORY_SHORT.items()}.get(full, full)
                stats = cache.setdefault(id(run), _category_stats(run, seed, n_boot))
                ours = stats.get(full)
                cat_name = cat_label(full)
            if not ours or ours.get("accuracy") is None:
                rows.append([text(spec), text(cond), text(cat), numc(f"{val:.2f}"), numc("no items"), numc("–"),
                             numc("–"), text(run.data)])
                continue
            diff = ours["accuracy"] - val / 100
            inside = (ours.get("ci_low") is not None and ours["ci_low"] <= val / 100 <= ours["ci_high"])
            rows.append([text(spec), text(cond), text(cat_name), numc(f"{val:.2f}"),
                         acc_cell(ours["accuracy"], ours.get("ci_low"), ours.get("ci_high"), inline=True),
                         numc(signed_pp(diff)),
                         numc('<span class="yes">yes</span>' if inside else '<span class="no">no</span>'),
                         text(run.data)])
    return section("published", "Published numbers", explain, table(head, rows))


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


def provenance_section(d: ReportData, meta: Mapping[str, Any] | None, seed: int, n_boot: int) -> str:
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
            v = r.summary.get("versions") or {}
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
            s = r.summary
            info = s.get("model_info") or {}
            row: list[Cell | str] = []
            if r.key not in seen:
                seen.add(r.key)
                hs = _hashes(info)
                fp = info.get("fingerprint", info)
                row += [model_cell(r.key, is_baseline(r), rowspan=span[r.key]),
                        Cell(esc(content_key(fp)[:12]), "hash", json.dumps(fp, default=str)[:400], rowspan=span[r.key]),
                        Cell("<br>".join(f"{esc(k)}: {esc(val[:16])}" for k, val in sorted(hs.items())) or "–",
                             "hash", rowspan=span[r.key])]
            row += [text(r.condition, "nowrap"), text(r.data), numc(fnum(s.get("seed"))),
                    numc(fnum(s.get("wall_time_s"), 1)), Cell(esc(rel(r.path, d.root)), "path")]
            rows.append(row)
            classes.append("baseline" if is_baseline(r) else "")
        body.append("<h3>Eval runs</h3>" + table(head, rows, row_classes=classes,
                                                 caption="fingerprint: hash of the RM's identity (spec, weights "
                                                         "revision, template); hover for the full fingerprint"))
    else:
        body.append(empty("No eval runs."))
    if d.downstream:
        head = ["RM", "setting", "grader", Cell("seed", "num"), Cell("items", "num"), "fingerprint", "file"]
        rows = [[model_cell(r.rm), text(r.setting), text(r.grader), numc(fnum(r.extra.get("seed"))),
                 numc(fnum(r.n_items)), Cell(esc(content_key(r.extra.get("rm_fingerprint"))[:12]) if
                                             r.extra.get("rm_fingerprint") else "–", "hash"),
                 Cell(esc(rel(f, d.root)), "path")] for f, r in d.downstream]
        body.append("<h3>Downstream results</h3>" + table(head, rows))
    if d.policy_accuracy:
        head = ["RM", "policy", "condition", Cell("seed", "num"), Cell("wall s", "num"), "run folder"]
        rows = [[model_cell(str(s.get("rm") or "(plain policy)")), text(s.get("policy")), text(s.get("condition")),
                 numc(fnum(s.get("seed"))), numc(fnum(s.get("wall_time_s"), 1)), Cell(esc(rel(p, d.root)), "path")]
                for p, s, _ in d.policy_accuracy]
        body.append("<h3>Policy-accuracy runs</h3>" + table(head, rows))
    if d.builds:
        rows = [[Cell(esc(rel(p, d.root)), "path"), text(rep.get("rule_text", "–"))] for p, rep in d.builds]
        body.append("<h3>Build reports</h3>" + table(["file", "filter rule"], rows))
    if meta:
        body.append("<h3>Meta-evaluation parameters</h3>" + table(
            ["parameter", "value"], [[text(k), Cell(esc(json.dumps(v, default=str)), "hash")]
                                     for k, v in meta["parameters"].items()]))
    if d.notes:
        body.append("<ul>" + "".join(f'<li class="note">{esc(n)}</li>' for n in d.notes) + "</ul>")
    return section("provenance", "Provenance", explain, "".join(body))


# --------------------------------------------------------------------------- page


def _css() -> str:
    return (Path(__file__).with_name("style.css")).read_text(encoding="utf-8")


def _cards(d: ReportData, meta: Mapping[str, Any] | None) -> str:
    rms = {r.key for r in d.evals}
    non_base = {r.key for r in d.evals if not is_baseline(r)}
    conds = {r.condition for r in d.evals}
    pairs = max((r.summary["metrics"].get("n_total") or 0 for r in d.evals), default=0)
    ds = len({(r.setting, r.rm) for _, r in d.downstream}) + len(d.policy_accuracy)
    cards = [("reward models", f"{len(rms)}", f"{len(rms) - len(non_base)} baselines"),
             ("conditions", f"{len(conds)}", ", ".join(c for c in CONDITIONS if c in conds)),
             ("pairs per run", f"{pairs:,}", ", ".join(sorted({r.data for r in d.evals}))),
             ("downstream results", f"{ds}", "BoN / RL / RGD / policy acc."),
             ("meta rows", f"{len(main_rows(meta)) if meta else 0}", "benchmark × setting")]
    return '<div class="cards">' + "".join(
        f'<div class="card" title="{esc(t)}"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v, t in cards) + "</div>"


def render(d: ReportData, *, title: str, published: Mapping[str, Any] | None = None,
           meta: Mapping[str, Any] | None = None, meta_error: str | None = None, seed: int = 0,
           n_boot: int = 1000) -> str:
    """The whole page as a string (all sections, ids stable)."""
    builders: dict[str, Callable[[], str]] = {
        "leaderboard": lambda: leaderboard_section(d, seed, n_boot),
        "conditions": lambda: conditions_section(d, seed, n_boot),
        "diagnostics": lambda: diagnostics_section(d),
        "build": lambda: build_section(d),
        "bon": lambda: bon_section(d),
        "rl-rgd": lambda: rl_rgd_section(d),
        "meta": lambda: meta_section(d, meta, meta_error),
        "published": lambda: published_section(d, published, seed, n_boot),
        "provenance": lambda: provenance_section(d, meta, seed, n_boot),
    }
    sections = [builders[sid]() for sid, _ in SECTIONS]
    toc = "".join(f'<a href="#{esc(sid)}">{esc(label)}</a>' for sid, label in SECTIONS)
    sub = (f"Personalized reward-model benchmark report · runs folder <code>{esc(d.root.name or str(d.root))}</code> · "
           f"prbench {esc(__version__)}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta name=\"generator\" content=\"prbench {esc(__version__)}\">"
            f"<title>{esc(title)}</title><style>{_css()}</style></head><body>"
            f'<header class="top"><div class="inner"><h1>{esc(title)}</h1><p class="subtitle">{sub}</p>'
            f'<nav class="toc">{toc}</nav></div></header><main>{_cards(d, meta)}'
            + "".join(sections)
            + f"<footer>Generated by prbench {esc(__version__)}. Self-contained: no external resources.</footer>"
            "</main></body></html>\n")


def build_report(
    runs_dir: str | Path,
    out_html: str | Path,
    *,
    title: str = "prbench report",
    published: Mapping[str, Any] | None = None,
    seed: int = 0,
    n_boot: int = 1000,
    n_perm: int = 1000,
    meta: Mapping[str, Any] | None = None,
    meta_options: Mapping[str, Any] | None = None,
) -> Path:
    """Write one self-contained HTML report for everything under `runs_dir`; returns its path.

    The meta-evaluation is computed here (eval runs x downstream results found under
    `runs_dir`, `meta_evaluate` with `seed`, `n_boot`, `n_perm` and `meta_options`) unless a
    precomputed `meta` result is given. `published`: {model_spec: {condition: {category: %}}}.
    """
    d = collect(runs_dir)
    meta_error = None
    if meta is None and d.evals and (d.downstream or d.policy_accuracy):
        try:
            opts = {"bon_k": "max", **dict(meta_options or {})}  # the report shows BoN at its largest k
            meta = meta_evaluate([d.root], [d.root], seed=seed, n_boot=n_boot, n_perm=n_perm, **opts)
        except PrbenchError as exc:
            meta_error = str(exc)
    page = render(d, title=title, published=published, meta=meta, meta_error=meta_error, seed=seed, n_boot=n_boot)
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
