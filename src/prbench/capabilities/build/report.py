"""The report's benchmark-build section (the build kind's validation report)."""

from __future__ import annotations

from collections.abc import Callable

from prbench.report.data import ReportData
from prbench.report.widgets import Cell, cat_label, empty, esc, fnum, numc, pct, rel, section, table, text
from prbench.runkinds.build import BuildSection, ScaleStats


def build_section(d: ReportData, seed: int, n_boot: int) -> str:
    """The build kind's section (called as every kind's own section is; a build report has no CI to draw)."""
    explain = ("The benchmark build's validation: a validator LLM scored every chosen and rejected answer 1-5 on "
               "factuality, relevance, helpfulness and rubric (personal) fit. A good pair is close on the first three "
               "and far apart on rubric fit. Cells: mean (min-max) over kept pairs.")
    if not d.builds:
        return section("build", "Benchmark build", explain,
                       empty("No build report (report.json from `prbench build`) under this folder."))
    body = []
    for path, rep in d.builds:
        secs = {**rep.categories, "all": rep.all}
        body.append(f"<h3>{esc(rel(path, d.root))}</h3>")
        if rep.rule_text:
            body.append(f'<p class="explain">Filter: {esc(rep.rule_text)}</p>')
        scales: list[str] = []
        for s in secs.values():
            scales.extend(k for k in s.scales_kept if k not in scales)
        order = ("factuality", "relevance", "helpfulness", "rubric_fit")
        scales.sort(key=lambda k: (order.index(k) if k in order else len(order), k))
        head = ["dimension", *[Cell(f"{esc(cat_label(c))} {part}", "num") for c in secs
                               for part in ("chosen", "rejected", "gap")]]
        rows = []
        for sc in scales:
            row: list[Cell | str] = [text(sc.replace("_", " "))]
            for s in secs.values():
                t = s.scales_kept[sc] if sc in s.scales_kept else ScaleStats()
                for v in (t.chosen, t.rejected):
                    row.append(numc("–" if not v else f"{v.mean:.2f}<span class=\"ci\">({v.min:g}-{v.max:g})</span>"))
                g = t.gap
                row.append(numc("–" if g is None else f"<b>{g:+.2f}</b>" if sc == "rubric_fit" else f"{g:+.2f}"))
            rows.append(row)
        body.append(table(head, rows, caption="validator scores of kept pairs, 1-5"))
        head = ["", *[Cell(esc(cat_label(c)), "num") for c in secs]]
        rows = [["kept / processed", *[numc(f"{s.kept} / {s.processed}") for s in secs.values()]],
                ["dropped", *[numc(fnum(s.dropped)) for s in secs.values()]]]
        reasons = sorted({k for s in secs.values() for k in s.dropped_by_reason})
        for reason in reasons:
            rows.append([text(f"dropped: {reason}"), *[numc(fnum(sec.dropped_by_reason.get(reason, 0))) for sec in secs.values()]])
        cells: tuple[tuple[str, Callable[[BuildSection], str]], ...] = (
            ("chosen longer (kept)", lambda s: pct(s.length_kept.chosen_longer)),
            ("generation failed", lambda s: fnum(s.generation.failed)),
            ("validator parse failures", lambda s: fnum(s.validation.parse_failures)))
        for label, cell in cells:
            rows.append([text(label), *[numc(cell(s)) for s in secs.values()]])
        body.append(table(head, rows, caption="pairs kept and dropped (first failing check)"))
    return section("build", "Benchmark build", explain, "".join(body))
