"""The report's policy-accuracy block: one table per setting, grouped by the kind's own group key."""

from __future__ import annotations

from prbench.report import plots
from prbench.report import widgets as w
from prbench.report.data import ReportData
from prbench.runkinds import Run, RunKind


def policy_accuracy_section(d: ReportData, kind: RunKind) -> str:
    runs = d.of_kind(kind)
    body = ["<h3>Policy accuracy</h3>"]
    if not runs:
        return body[0] + w.empty("No policy-accuracy runs (`prbench policy-accuracy`) under this folder.")
    for key, members in sorted(kind.report_groups(runs).items()):
        s = (members[0].summary if members else {}) or {}
        body.append(f"<h4>policy {w.esc(s.get('policy'))} · RM condition {w.esc(s.get('condition'))} · w={w.esc(s.get('w'))}"
                    f" · k={w.esc(s.get('k'))} · mode {w.esc(s.get('mode'))}</h4>")
        body.append(_group(members))
    return "".join(body)


def _group(members: list[Run]) -> str:
    head = ["RM", w.Cell("policy accuracy", "num"), w.Cell("length-normalised", "num"),
            w.Cell("plain policy", "num"), w.Cell("RM's own accuracy", "num"), w.Cell("same as plain", "num"),
            w.Cell("top-k coverage", "num"), w.Cell("pairs", "num")]
    rows, classes, bars = [], [], []
    plain_ref = None
    for run in sorted(members, key=lambda m: (not m.summary.get("rm"), -(m.summary.get("policy_accuracy") or 0))):
        s = run.summary
        mm = s.get("metrics", {})
        tot = (mm.get("policy_accuracy") or {}).get("total") or {}
        nor = (mm.get("policy_accuracy") or {}).get("normalized") or {}
        plain = (mm.get("plain_policy_accuracy") or {}).get("total") or {}
        own = mm.get("rm_accuracy") or {}
        plain_ref = plain_ref if plain_ref is not None else plain.get("accuracy")
        name = s.get("rm") or "(no RM: plain policy)"
        rows.append([w.model_cell(name, w.is_control_spec(name), "" if s.get("rm") else "reference"),
                     *(w.acc_cell(v.get("accuracy"), v.get("ci_low"), v.get("ci_high")) for v in (tot, nor, plain, own)),
                     w.numc(w.pct((mm.get("agreement_with_plain") or {}).get("total"))),
                     w.numc(w.pct(mm.get("mean_topk_coverage"))), w.numc(w.fnum(mm.get("n")))])
        classes.append("reference" if not s.get("rm") else ("baseline" if w.is_control_spec(name) else ""))
        if s.get("rm"):
            bars.append((str(name), tuple(None if v is None else 100 * v for v in
                                          (tot.get("accuracy"), tot.get("ci_low"), tot.get("ci_high")))))
    return (w.figure(plots.hbars([b[0] for b in bars], [b[1] for b in bars], xlabel="policy accuracy (%)",
                               reference=None if plain_ref is None else 100 * plain_ref,
                               reference_label="plain policy"),
                   "policy accuracy per RM", "Guided policy accuracy per RM (95% CI); dashed: plain policy.")
            + w.table(head, rows, row_classes=classes,
                    caption="accuracy % with 95% CI; 'same as plain' = share of pairs where guidance did "
                            "not change the policy's preference"))
