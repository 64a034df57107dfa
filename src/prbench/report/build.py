"""The report's benchmark-build section (the build kind's validation report)."""

from __future__ import annotations

from prbench.report.data import ReportData
from prbench.report.widgets import Cell, cat_label, empty, esc, fnum, numc, pct, rel, section, table, text


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
