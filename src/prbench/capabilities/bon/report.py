"""The report's Best-of-N section (the bon kind: curves over k per RM)."""

from __future__ import annotations

from prbench.downstream.results import DownstreamResult
from prbench.report import plots
from prbench.report.data import ReportData
from prbench.report.widgets import (
    Cell,
    empty,
    esc,
    figure,
    fnum,
    is_control_spec,
    model_cell,
    numc,
    section,
    table,
)
from prbench.runkinds import Run
from prbench.runkinds.downstream import BonSummary, DownstreamKind


def plot_key(run: Run) -> tuple:
    """What makes one Best-of-N plot in the report: RM condition, grader, samples and the k grid (curves of
    one plot share their k values; meta compares RMs on the k values they share within `group_key`)."""
    res = run.kind.result(run) if isinstance(run.kind, DownstreamKind) else None
    samples = res.samples if isinstance(res, BonSummary) else None
    return (run.names.condition, run.ds.grader, str(samples or ""), tuple(run.ds.k))


def _bon_groups(d: ReportData) -> dict[tuple, list[tuple[BonSummary, DownstreamResult]]]:
    """Runs by the report's plot key (the bon kind's meta setting, split further by samples and k grid)."""
    groups: dict[tuple, list[tuple[BonSummary, DownstreamResult]]] = {}
    for run in d.of_kind("bon"):
        if run.downstream is not None and isinstance(run.kind, DownstreamKind):
            res = run.kind.result(run)
            assert isinstance(res, BonSummary)
            groups.setdefault(plot_key(run), []).append((res, run.downstream))
    return groups


def bon_section(d: ReportData, seed: int, n_boot: int) -> str:
    """The bon kind's section (called as every kind's own section is; the curves carry the CIs their runs wrote)."""
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
        typed, ref = max(members, key=lambda fr: fr[1].n_items)
        oracle, rand = typed.oracle, typed.random
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
