"""The report's meta-evaluation section (tables of `prbench.meta` results)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from prbench.meta import PAPER_COLUMNS, main_rows
from prbench.meta.result import CrossBenchmark, MetaParameters, MetaResult, MetaRow, PaperB, SummaryComparison
from prbench.report import plots
from prbench.report.data import ReportData
from prbench.report.widgets import Cell, empty, esc, figure, fnum, numc, section, table, text


def _p_span(p: float | None) -> str:
    return "" if p is None else f'<span class="p">p = {p:.3f}</span>'


def meta_section(d: ReportData, meta: MetaResult | None, meta_error: str | None) -> str:
    explain = ("Do benchmark rankings predict downstream rankings? Over the RMs present on both sides: NDCG (ranking "
               "by benchmark, gain = downstream score), weighted Kendall tau (top swaps count more), Spearman rho, "
               "rank-biased overlap (RBO) and Kendall tau-b, each with an item-bootstrap 95% CI and a one-sided "
               "permutation p-value. At least 3 RMs are needed. The paper reports NDCG 0.918 / weighted tau 0.341 / "
               "Spearman 0.257 for Best-of-N.")
    if meta_error:
        return section("meta", "Meta-evaluation", explain, empty(f"Meta-evaluation not computed: {meta_error}"))
    if not meta or not meta.rows:
        why = ("needs eval runs and downstream results (downstream.json or policy-accuracy runs) for the same RMs; "
               f"looked under {d.root.resolve()} and found {len(d.downstream)} downstream.json and "
               f"{len(d.policy_accuracy)} policy-accuracy runs" if not meta else "; ".join(meta.notes or ["no benchmark x downstream pairs"]))
        return section("meta", "Meta-evaluation", explain, empty(f"No meta-evaluation: {why}."))
    prm = meta.parameters
    rows = main_rows(meta)
    body_rows = _main_rows(rows)
    head = ["benchmark", "setting", Cell("RMs", "num"), *[Cell(esc(label), "num") for _, label in PAPER_COLUMNS],
            "resampling"]
    intro = (f'<p class="explain">Benchmark summary: <b>{esc(prm.summary_stat)}</b>; {prm.n_boot} bootstrap '
             f'resamples, {prm.n_perm} permutations, RBO p = {prm.p}, NDCG over '
             f'{"top " + str(prm.k) if prm.k else "all RMs"}, seed {prm.seed}. Best-of-N shown at its '
             "largest k (<code>prbench meta</code> gives every k). Small grey numbers: CI, then p-value.</p>")
    body = [intro, table(head, body_rows)]
    body += _scatters(rows, prm)
    if meta.cross_benchmark:
        body.append(cross_benchmark_html(meta.cross_benchmark))
    if meta.paper_b:
        body.append(_paper_b(meta.paper_b))
    body.append(_summary_comparison(meta.summary_comparison))
    notes = [f'{r.benchmark.label} × {r.setting.label}: {r.note}' for r in meta.rows if r.note]
    notes += list(meta.notes)
    if notes:
        body.append("<details><summary>Notes (" + str(len(notes)) + ")</summary><ul>"
                    + "".join(f'<li class="note">{esc(n)}</li>' for n in notes) + "</ul></details>")
    defs = meta.definitions
    body.append("<details><summary>Definitions and parameters</summary><dl class=\"defs\">"
                + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in defs.items())
                + "".join(f"<dt>parameter {esc(k)}</dt><dd>{esc(json.dumps(v, default=str))}</dd>"
                          for k, v in prm.model_dump().items()) + "</dl></details>")
    return section("meta", "Meta-evaluation", explain, "".join(body))


def cross_benchmark_html(entries: Sequence[CrossBenchmark]) -> str:
    """Per downstream setting, every benchmark's rank agreement; the best per metric marked."""
    from prbench.meta import CROSS_LABELS, CROSS_METRICS

    parts = [("<h3 id=\"cross-benchmark\">Which benchmark ranks the RMs most like each downstream setting</h3>"
              '<p class="explain">One table per downstream setting compared with two or more benchmarks. '
              "<b>best</b> marks the highest value per metric; best overall is best on most metrics (ties: "
              "Spearman). Small grey numbers: CI, then permutation p-value.</p>")]
    for c in entries:
        head = ["benchmark", Cell("RMs", "num"), *[Cell(esc(CROSS_LABELS[m]), "num") for m in CROSS_METRICS]]
        body_rows = []
        for e in c.benchmarks:
            cells = []
            for m in CROSS_METRICS:
                v = e.metric(m)
                if v.value is None:
                    cells.append(numc("–"))
                    continue
                ci = (f'<span class="ci">[{v.ci_low:.2f}, {v.ci_high:.2f}]</span>'
                      if v.ci_low is not None and v.ci_high is not None else "")
                # the badge on its own line under the number: beside it, it pushed the number out of alignment
                badge = '<span class="badge ref under">best</span>' if c.best[m] == e.benchmark else ""
                cells.append(numc(f"{v.value:.3f}{ci}{_p_span(v.p_value)}{badge}"))
            label = e.benchmark + (" (best overall)" if e.benchmark == c.best_overall else "")
            body_rows.append([text(label, "nowrap"), numc(fnum(e.n_rms)), *cells])
        note = "" if c.same_rms else ' <span class="warn">(benchmarks compared over different RM sets)</span>'
        parts.append(f"<h4>{esc(c.setting)}{note}</h4>" + table(head, body_rows))
    return "".join(parts)


def _main_rows(rows: Sequence[MetaRow]) -> list[list[Cell]]:
    """The headline table's rows: value, CI and p-value per paper column, or the row's note."""
    body_rows = []
    for r in rows:
        if r.metrics is None:
            body_rows.append([text(r.benchmark.label, "nowrap"), text(r.setting.label), numc(fnum(r.n_rms)),
                              Cell(f'<span class="warn">{esc(r.note)}</span>', "", ""),
                              *[numc("") for _ in PAPER_COLUMNS[1:]], text("–")])
            continue
        cells = []
        for name, _ in PAPER_COLUMNS:
            m = r.metrics[name]
            ci = (f'<span class="ci">[{m.ci_low:.2f}, {m.ci_high:.2f}]</span>'
                  if m.ci_low is not None and m.ci_high is not None else "")
            cells.append(numc(("–" if m.value is None else f'{m.value:.3f}') + ci + _p_span(m.p_value)))
        body_rows.append([text(r.benchmark.label, "nowrap"), text(r.setting.label), numc(fnum(r.n_rms)),
                          *cells, Cell(esc(r.resampling) + (f'<span class="ci">{r.n_items_benchmark} / '
                                                            f'{r.n_items_downstream} items</span>'),
                                       "nowrap")])
    return body_rows


def _scatters(rows: Sequence[MetaRow], prm: MetaParameters) -> list[str]:
    """One figure per downstream setting, one panel per benchmark."""
    body: list[str] = []
    names = sorted({rm for r in rows for rm in r.rms})
    palette = {n: plots.PALETTE[i % len(plots.PALETTE)] for i, n in enumerate(names)}
    by_setting: dict[str, list[MetaRow]] = {}
    for r in rows:
        if r.metrics is not None:
            by_setting.setdefault(r.setting.label, []).append(r)
    for label, rs in by_setting.items():
        panels = []
        for r in rs:
            bench, down = r.benchmark_scores or {}, r.downstream_scores or {}
            pts = {rm: (x if (x := bench[rm]) is None or prm.summary_stat == "mean_margin" else 100 * x, down[rm])
                   for rm in r.rms}
            sp, kt = r.metric("spearman").value, r.metric("kendall_tau_b").value
            panels.append({"title": r.benchmark.label, "points": pts,
                           "subtitle": f"rho={fnum(sp, 2)}  tau={fnum(kt, 2)}"})
        xlabel = "benchmark accuracy (%)" if prm.summary_stat != "mean_margin" else "mean margin"
        body.append(figure(plots.scatter_panels(panels, xlabel=xlabel, ylabel="downstream score", title=label,
                                                colors=palette),
                           f"benchmark vs downstream: {label}",
                           f"One point per RM: benchmark {prm.summary_stat} (x) vs {label} (y)."))
    return body


def _paper_b(entries: Sequence[PaperB]) -> str:
    head = ["RM accuracy from", "setting", Cell("RMs", "num"), Cell("Kendall tau-b", "num"), Cell("Spearman", "num")]
    prow = []
    for e in entries:
        kt, sp = e.kendall_tau_b, e.spearman
        prow.append([text(e.benchmark), text(e.setting), numc(fnum(e.n_rms)),
                     numc((f'{kt.value:.3f}' if kt and kt.value is not None else
                           esc(e.note or ("undefined (constant scores)" if kt else "–")))
                          + (f'<span class="ci">[{kt.ci_low:.2f}, {kt.ci_high:.2f}]</span>'
                             if kt and kt.ci_low is not None and kt.ci_high is not None else "")
                          + _p_span(kt.p_value if kt else None)),
                     numc(f'{sp.value:.3f}' if sp and sp.value is not None else "–")])
    return "<h3>RM accuracy vs policy accuracy (paper B reports Kendall tau 0.08-0.31)</h3>" + table(head, prow)


def _summary_comparison(comp: SummaryComparison) -> str:
    if not comp.overall:
        return ""
    head = ["benchmark summary", Cell("mean Spearman", "num"), Cell("mean Kendall", "num"),
            Cell("common rows", "num"), Cell("rows with a value", "num"), Cell("best in rows", "num")]
    crow = []
    for name, v in comp.overall.items():
        best = name == comp.best
        crow.append([Cell(esc(name) + (' <span class="badge ref">best</span>' if best else ""), ""),
                     numc(fnum(v.mean_spearman)), numc(fnum(v.mean_kendall_tau_b)), numc(fnum(v.n_rows)),
                     numc(fnum(v.n_rows_available)), numc(fnum(v.best_in_rows))])
    return ("<h3>Which benchmark summary predicts downstream best</h3>"
            f'<p class="explain">{esc(comp.rule)}. mean = accuracy; worst_category = each RM\'s '
            "lowest category accuracy; mean_margin = mean score(chosen) − score(rejected), pointwise RMs "
            "only.</p>" + table(head, crow))
