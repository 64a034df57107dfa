"""Report sections over eval runs: leaderboard, input conditions, diagnostics, published numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from pydantic import ValidationError

from prbench.errors import DataError, PrbenchError
from prbench.evaluation import validity
from prbench.leaderboard import SETTINGS, RunConfig, setting_text
from prbench.report import plots
from prbench.report.data import ReportData, category_stats, conditions_of, ev, model_order
from prbench.report.widgets import (
    CONDITION_HELP,
    OVERALL_KEYS,
    Cell,
    acc_cell,
    cat_label,
    empty,
    esc,
    figure,
    fnum,
    is_baseline,
    model_cell,
    numc,
    pct,
    section,
    signed_pp,
    table,
    text,
)
from prbench.runkinds import Run
from prbench.runkinds.base import run_credits
from prbench.schema import CATEGORIES, CATEGORY_SHORT, normalize_category
from prbench.stats import metrics
from prbench.store.records import Accuracy, LengthBias, PairwiseStats

LEADERBOARD_EXPLAIN = (
    "Accuracy (%) = share of preference pairs where the RM prefers the user's <em>chosen</em> answer; "
    "an exact tie counts 0.5; invalid outputs are excluded and counted under Diagnostics. "
    "Small numbers: 95% percentile-bootstrap CI over items. Baselines (length, random, lexical, ...) "
    "are marked and greyed; 50% is chance. <b>Pairs</b>: items each model's runs scored (LLM rows often run on "
    "fewer, with wider CIs). Bold: the best non-baseline model of a column, only when it is above every baseline "
    "there and its CI is above chance."
)

CONDITIONS_EXPLAIN = (
    "What the RM sees: <b>none</b> (question only), <b>profile</b> (retrieved posts of this user), "
    "<b>planner</b> (aspects a planner inferred from the profile), <b>oracle</b> (the true rubric: an upper "
    "bound) and <b>wrong-profile</b> (another user's posts: a control; a gain that also shows up here is "
    "not personalization). Whiskers: 95% bootstrap CI. Differences in percentage points with a paired "
    "bootstrap 95% CI over the items both runs scored."
)


class _Grid(NamedTuple):
    """One data set's eval runs laid out as the model x condition grid the tables and plots show."""

    data: str
    runs: list[Run]
    conds: list[str]
    models: list[str]
    cell: dict[tuple[str, str], Run]


def _grids(d: ReportData) -> list[_Grid]:
    return [_Grid(data, runs, conditions_of(runs), model_order(runs), {(r.key, r.condition): r for r in runs})
            for data, runs in d.by_data().items()]


def display_name(runs: list[Run], key: str) -> str:
    """The model as the leaderboard names it: the run's own name (a judge's mode tag) and both orders."""
    r = next(r for r in runs if r.key == key)
    name = ev(r).model or key
    try:
        both = RunConfig.model_validate(r.config).both_orders
    except (DataError, ValidationError):  # a damaged config.json is named under provenance; the name goes untagged
        both = False
    return f"{name} (both orders)" if both and "both orders" not in name else name


def _run_settings(r: Run) -> dict[str, Any]:
    """A run's settings that change its number (leaderboard.SETTINGS); a damaged config.json gives none."""
    try:
        cfg = RunConfig.model_validate(r.config)
    except (DataError, ValidationError):  # named under provenance
        return {}
    return {k: getattr(cfg, k) for k in SETTINGS}


def settings_texts(runs: list[Run], models: list[str]) -> dict[str, str] | None:
    """Per model, the settings that differ between the table's runs ("top_k=5"; "top_k=5/10" where one model's
    runs differ); None when every run of the table used the same, so the column only appears when it matters."""
    per = {m: [_run_settings(r) for r in runs if r.key == m] for m in models}
    every = [st for sts in per.values() for st in sts]
    keys = [k for k in SETTINGS if len({repr(st.get(k)) for st in every}) > 1]
    if not keys:
        return None
    return {m: ", ".join(setting_text(k, *sorted({st.get(k) for st in per[m]}, key=repr)) for k in keys)
            for m in models}


def _best_per_condition(cell: dict, models: list[str], base: dict[str, bool], conds: list[str]) -> dict[str, str | None]:
    """The best non-baseline per column, only when it is above every baseline there and its CI above chance."""
    best: dict[str, str | None] = {}
    for c in conds:
        acc = {m: ev(cell[(m, c)]).metrics for m in models if (m, c) in cell}
        val = {m: a.accuracy for m, a in acc.items() if a.accuracy is not None}
        top = max((m for m in val if not base[m]), key=lambda m: val[m], default=None)
        bar = max((val[m] for m in val if base[m]), default=0.0)
        ok = top is not None and val[top] > bar and (acc[top].ci_low or 0.0) > 0.5 and not _faults(cell[(top, c)])
        best[c] = top if ok else None
    return best


def _pairs(runs: list[Run], m: str) -> str:
    ns = sorted({ev(r).n_total for r in runs if r.key == m})
    return "–" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"


def _acc(r: Run) -> float:
    """A scored run's accuracy (callers keep only runs whose accuracy is a number)."""
    return ev(r).metrics.accuracy or 0.0


def headline(d: ReportData) -> str:
    """Per data set, the toolkit's question first: does an RM use the person (its gain over the wrong-user
    control, paired), then the best model among those whose checks hold (`prbench.evaluation.validity.faults`: never one
    scored on the people it was trained on, answering one letter, agreeing with the labels no more than chance or
    tying most pairs); a model scoring higher that failed a check is named with the reason. The same sentences
    as `prbench leaderboard` prints (`prbench.leaderboard.Headline`)."""
    from prbench.leaderboard import headlines, rows_of

    lines = [line for h in headlines(rows_of(d.evals)) for line in h.lines(html=True)]
    return "".join(f'<p class="headline{" warn" if ": not named best:" in s else ""}">{s}</p>'
                   for s in lines)


def leaderboard_section(d: ReportData, seed: int, n_boot: int) -> str:
    explain = LEADERBOARD_EXPLAIN
    if not d.evals:
        return section("leaderboard", "Leaderboard", explain, empty("No eval runs found. Run `prbench eval` first."))
    body = []
    for data, runs, conds, models, cell in _grids(d):
        base = {r.key: is_baseline(r) for r in runs}
        body.append(f"<h3>Data: {esc(data)}</h3>")
        best_per_cond = _best_per_condition(cell, models, base, conds)
        sets = settings_texts(runs, models)
        head = ["model", Cell("pairs", "num", "items scored per run"),
                *([Cell("settings", "", "run settings that differ between rows: numbers not comparable as they "
                                        "stand")] if sets else []),
                *[Cell(f'{esc(c)}', "num", CONDITION_HELP.get(c, "")) for c in conds]]
        rows = []
        for m in models:
            row: list[Cell | str] = [model_cell(display_name(runs, m), base[m]), numc(_pairs(runs, m)),
                                     *([Cell(esc(sets[m]), "settings")] if sets else [])]
            for c in conds:
                if (m, c) not in cell:
                    row.append(numc("–"))
                    continue
                s = ev(cell[(m, c)])
                mm = s.metrics
                tip = f"n = {mm.n} valid of {s.n_total}; invalid {mm.n_invalid}"
                why = _faults(cell[(m, c)])
                if why:
                    tip += "; not ranked: " + "; ".join(why)
                who = validity.people(s)
                acc = acc_cell(mm.accuracy, mm.ci_low, mm.ci_high, title=tip, best=best_per_cond[c] == m)
                if who is not None and who.seen:  # a training person's score, named where it shows
                    acc = Cell(acc.html + f'<span class="warn inline-ci">seen people {100 * who.share:.0f}%</span>',
                               acc.cls, acc.title)
                row.append(acc)
            rows.append(row)
        body.append(table(head, rows, row_classes=["baseline" if base[m] else "" for m in models]))
        body.append(_by_category(runs, models, conds, cell, base, seed, n_boot))
        body.append(stats_panel(runs))
    return section("leaderboard", "Leaderboard", explain, "".join(body))


def _by_category(runs: list[Run], models: list[str], conds: list[str], cell: dict, base: dict[str, bool],
                 seed: int, n_boot: int) -> str:
    """One row per (model, condition), the model cell spanning its conditions."""
    stats = {(r.key, r.condition): category_stats(r, seed, n_boot) for r in runs}
    cats = sorted({k for st in stats.values() for k in st}, key=lambda k: (k not in CATEGORIES, k))
    head = ["model", "condition", Cell("all (micro)", "num"), Cell("macro", "num"),
            *[Cell(esc(cat_label(k)), "num", k) for k in cats]]
    rows, classes = [], []
    for m in models:
        mine = [c for c in conds if (m, c) in cell]
        for j, c in enumerate(mine):
            mm = ev(cell[(m, c)]).metrics
            macro = (mm.categories.macro if mm.categories else None) or Accuracy()
            row: list[Cell | str] = [model_cell(display_name(runs, m), base[m], rowspan=len(mine))] if j == 0 else []
            row += [Cell(esc(c), "nowrap", CONDITION_HELP.get(c, "")),
                    acc_cell(mm.accuracy, mm.ci_low, mm.ci_high, inline=True),
                    acc_cell(macro.accuracy, macro.ci_low, macro.ci_high, inline=True)]
            for k in cats:
                st = stats[(m, c)]
                row.append(acc_cell(st[k].accuracy, st[k].ci_low, st[k].ci_high, title=f"n = {st[k].n}",
                                    inline=True) if k in st else numc("–"))
            rows.append(row)
            classes.append("baseline" if base[m] else "")
    return ("<details open><summary>By category (macro = unweighted mean of category accuracies, CI "
            "stratified by category; category CIs recomputed from the per-item records)</summary>"
            + table(head, rows, row_classes=classes, cls="compact") + "</details>")


def conditions_section(d: ReportData, seed: int, n_boot: int) -> str:
    explain = CONDITIONS_EXPLAIN
    if not d.evals:
        return section("conditions", "Input conditions", explain, empty("No eval runs found."))
    body = []
    for data, runs, conds, models, cell in _grids(d):
        vals = {(m, c): (ev(r).metrics.accuracy, ev(r).metrics.ci_low, ev(r).metrics.ci_high)
                for (m, c), r in cell.items()}
        vals = {k: (_pct(v[0]), _pct(v[1]), _pct(v[2])) for k, v in vals.items()}
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
            row: list[Cell | str] = [model_cell(display_name(runs, m), any(is_baseline(r) for r in runs if r.key == m))]
            for a, b in pairs:
                if (m, a) not in cell or (m, b) not in cell:
                    row.append(numc("–"))
                    continue
                ra, rb = cell[(m, a)], cell[(m, b)]
                ca, cb = run_credits(ra), run_credits(rb)
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
               "share of verdicts for the first answer; <b>consistent</b>: share of pairs given the same answer in both orders "
               "(<code>--both-orders</code>). A judge that always answers A shows says A = 100% and consistent = 0%: its "
               "verdict follows the position, not the answers. With both orders, a likelihood judge compares p(\"A\") "
               "averaged over the two positions (so it has no ties and can still score above chance), and a "
               "pairwise judge counts an inconsistent pair as a tie. <b>Invalid</b>: "
               "unparseable verdicts or failed scores, excluded from accuracy and never guessed. <b>Truncated</b>: "
               "inputs cut to fit the model's context.")
    if not d.evals:
        return section("diagnostics", "Diagnostics", explain, empty("No eval runs found."))
    body = []
    for data, runs in d.by_data().items():
        rec = next((r.items for r in runs if r.items), [])
        longer = [r.longer for r in rec]
        if longer:
            share = sum(1 for x in longer if x == "chosen") / len(longer)
            body.append(f"<h3>Data: {esc(data)}</h3><p class=\"explain\">The chosen answer is the longer one in "
                        f"<b>{100 * share:.1f}%</b> of {len(longer)} pairs (so a length-only RM scores about that).</p>")
        else:
            body.append(f"<h3>Data: {esc(data)}</h3>")
        any_pairwise = any(ev(r).metrics.pairwise is not None for r in runs)
        any_margin = any(ev(r).metrics.mean_margin is not None for r in runs)
        head = ["model", "condition", Cell("n", "num"), Cell("invalid", "num"), Cell("truncated", "num"),
                Cell("ties", "num"), Cell("prefers longer", "num")]
        if any_margin:
            head.append(Cell("mean margin", "num", "mean score(chosen) - score(rejected), RM units"))
        usd = {id(r): cost.usd if (cost := ev(r).cost) is not None else None for r in runs}
        any_usd = any(v is not None for v in usd.values())
        if any_usd:
            head.append(Cell("$ API", "num", "dollars of the run's API requests at the dated list prices (summary cost)"))
        if any_pairwise:
            head += [Cell("acc chosen=A / =B", "num", "accuracy when chosen was shown as A / as B"),
                     Cell("says A", "num", "share of A verdicts among A/B verdicts"),
                     Cell("parse failures", "num"), Cell("consistent", "num", "same side in both orders (--both-orders)")]
        rows, classes = [], []
        order = {m: i for i, m in enumerate(model_order(runs))}
        conds = conditions_of(runs)
        ordered = sorted(runs, key=lambda r: (order[r.key], conds.index(r.condition)))
        span = {m: sum(1 for r in runs if r.key == m) for m in order}
        seen: set[str] = set()
        for r in ordered:
            m = ev(r).metrics
            lb = m.length_bias or LengthBias()
            pw = m.pairwise or PairwiseStats()
            inv = m.n_invalid
            pl = lb.prefers_longer
            pl_cls = "warn" if pl is not None and abs(pl - 0.5) > 0.2 else ""
            gap = (pw.accuracy_chosen_A is not None and pw.accuracy_chosen_B is not None
                   and abs(pw.accuracy_chosen_A - pw.accuracy_chosen_B) > 0.1)
            row: list[Cell | str] = []
            if r.key not in seen:
                row.append(model_cell(display_name(runs, r.key), is_baseline(r), rowspan=span[r.key]))
                seen.add(r.key)
            row += [text(r.condition, "nowrap"), numc(fnum(m.n_total if m.n_total is not None else m.n)),
                    numc(f'<span class="warn">{inv}</span>' if inv else "0"), numc(fnum(m.truncated_inputs)),
                    numc(fnum(m.ties)),
                    numc((f'<span class="{pl_cls}">{pct(pl)}</span>' if pl is not None else "–")
                         + (f'<span class="inline-ci">n={lb.n}</span>' if lb.n is not None else ""))]
            if any_margin:
                row.append(numc(fnum(m.mean_margin, 4)))
            if any_usd:
                row.append(numc("–" if usd[id(r)] is None else f"{usd[id(r)]:.2f}"))
            if any_pairwise:
                ab = f"{pct(pw.accuracy_chosen_A)} / {pct(pw.accuracy_chosen_B)}" if m.pairwise else "–"
                row += [numc(f'<span class="warn">{ab}</span>' if gap else ab),
                        numc(pct(pw.share_verdict_A)), numc(fnum(pw.parse_failures)),
                        numc(pct(pw.position_consistency))]
            rows.append(row)
            classes.append("baseline" if is_baseline(r) else "")
        body.append(table(head, rows, row_classes=classes,
                          caption="percentages except n, counts and margin (score units); – = not applicable; "
                                  "highlighted: length preference beyond 30/70% or an A/B accuracy gap over 10 points"))
        body.extend(_validity_panel(r) for r in ordered if ev(r).validity is not None or _faults(r))
    return section("diagnostics", "Diagnostics", explain, "".join(body))


def _faults(r: Run) -> list[str]:
    """Why a run's number is not a ranking (`prbench.evaluation.validity.faults`), from its summary and records."""
    return validity.faults(ev(r), r.items)


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.2g}"


def _validity_panel(r: Run) -> str:
    """One run's validity card (prbench.evaluation.validity): gain over its wrong-user control, controls, the people a trained RM
    was scored on that it was trained on (their accuracy apart from the others'), and why it is not ranked."""
    s, key = ev(r), r.key
    parts = []
    if (v := s.validity) is not None:
        g, ln, pos = v.gain, v.length, v.position
        parts.append(f"gain over <code>{esc(v.control)}</code>: <b>{100 * g.diff:+.1f}</b> points "
                     f"[{pct(g.ci_low)}, {pct(g.ci_high)}], p = {_p(g.p_value)} (n = {v.n_shared})"
                     if g else "no item shared with the control")
        parts.append(f"prefers longer {pct(ln.prefers_longer)} (p = {fnum(ln.p_value, 3)})")
        parts.append(f"says A {pct(pos.share_A)} (p = {fnum(pos.p_value, 3)})" if pos.applicable
                     else "position: n/a (pointwise)")
        parts.append(f"scored with context {pct(v.context_share)}")
    if (who := validity.people(s)) is not None and who.seen:
        parts.append(f'<span class="warn">{esc(who.text())}: a score on people it was trained on, no estimate for '
                     "a new person</span>")
    if why := _faults(r):
        parts.append(f'<span class="warn">not ranked: {esc("; ".join(why))}</span>')
    return f"<p class=\"explain\">Validity, {esc(key)} [{esc(r.condition)}]: {'; '.join(parts)}.</p>"


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
    runs_by: dict[tuple[str, str], list[Run]] = {}
    for r in d.evals:
        for a in r.aliases:
            runs_by.setdefault((a, r.condition), []).append(r)
    head = ["model", "condition", "category", Cell("published", "num"), Cell("ours", "num"), Cell("difference", "num"),
            Cell("within CI", "num"), "data"]
    rows = []
    cache: dict[int, dict[str, Accuracy]] = {}
    for spec, cond, cat, val in items:
        runs = runs_by.get((spec, cond), [])
        if not runs:
            rows.append([text(spec), text(cond), text(cat), numc(f"{val:.2f}"), numc("not run"), numc("–"), numc("–"),
                         text("–")])
            continue
        for run in runs:
            ours: Accuracy | None
            if cat.strip().lower() in OVERALL_KEYS:
                ours = ev(run).metrics
                cat_name = "all"
            else:
                full = normalize_category(cat)
                full = next((k for k, v in CATEGORY_SHORT.items() if v == full), full)
                stats = cache.setdefault(id(run), category_stats(run, seed, n_boot))
                ours = stats.get(full)
                cat_name = cat_label(full)
            if ours is None or ours.accuracy is None:
                rows.append([text(spec), text(cond), text(cat), numc(f"{val:.2f}"), numc("no items"), numc("–"),
                             numc("–"), text(run.data)])
                continue
            diff = ours.accuracy - val / 100
            inside = ours.ci_low is not None and ours.ci_high is not None and ours.ci_low <= val / 100 <= ours.ci_high
            rows.append([text(spec), text(cond), text(cat_name), numc(f"{val:.2f}"),
                         acc_cell(ours.accuracy, ours.ci_low, ours.ci_high, inline=True),
                         numc(signed_pp(diff)),
                         numc('<span class="yes">yes</span>' if inside else '<span class="no">no</span>'),
                         text(run.data)])
    return section("published", "Published numbers", explain, table(head, rows))


def stats_panel(runs: list[Run]) -> str:
    """How far the numbers above can be trusted: where sequential runs stopped and why (`prbench.evaluation.sequential`),
    the smallest difference each run resolves (`prbench.stats.power`), and the judges' agreement (`prbench.meta.stats`)."""
    from prbench.meta.stats import judge_agreement
    from prbench.stats.power import resolvable

    out = []
    seqs = [ev(r).sequential for r in runs]
    stops = {seq.stopped: seq for seq in seqs if seq is not None}
    for why, seq in stops.items():
        out.append(f'<p class="explain">Stopped early (<code>--until {esc(seq.rule)}</code>, '
                   f'{fnum(seq.n_used)} of {fnum(seq.n_items)} items in one seeded order): {esc(why)}. '
                   "Intervals are anytime-valid confidence sequences (betting, Waudby-Smith &amp; Ramdas 2024).</p>")
    res = [v for v in (resolvable(r.items) for r in runs) if v is not None]
    if res:
        worst, best = max(res), min(res)
        out.append(f'<p class="explain">Smallest accuracy difference these runs resolve (80% power, level 0.05, '
                   f"against a fixed value; users as clusters): {100 * best:.1f}"
                   + (f"-{100 * worst:.1f}" if worst > best else "") + " points. Smaller differences between rows "
                   "are not evidence; <code>prbench power</code> sizes a study that can see them.</p>")
    for cond in conditions_of(runs):
        agree = judge_agreement({r.key: r for r in runs if r.condition == cond})
        if not agree or not agree.judges:
            continue
        rows: list[list[Cell | str]] = [[display_name(runs, x.judge), text("labels"), numc(fnum(x.kappa, 2)),
                                         numc(fnum(x.n))] for x in agree.with_labels]
        rows += [[display_name(runs, x.a), text(display_name(runs, x.b)), numc(fnum(x.kappa, 2)),
                  numc(fnum(x.n))] for x in agree.pairs]
        alpha = agree.krippendorff_alpha
        out.append(table(["judge", "with", Cell("Cohen's kappa", "num"), Cell("n", "num")], rows,
                         caption=f"judge agreement [{esc(cond)}]: with labels = the position picked vs the position "
                                 "of the chosen answer; between judges = the side picked"
                         + (f"; Krippendorff's alpha {alpha:.2f}" if alpha is not None else "")))
    return "".join(out)


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x
