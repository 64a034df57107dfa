"""The report's policy-accuracy block: one table per setting, grouped by the kind's own group key."""

from __future__ import annotations

from collections.abc import Sequence

from prbench.report import plots
from prbench.report import widgets as w
from prbench.report.data import ReportData
from prbench.runkinds import Run, RunKind
from prbench.store.records import PolicyAccuracySummary


def report_groups(kind: RunKind, runs: Sequence[Run]) -> dict[tuple, list[Run]]:
    """The report's tables: one per setting (group key), each with the plain policy of its policy and data."""
    groups: dict[tuple, list[Run]] = {}
    plain: dict[tuple, list[Run]] = {}
    for run in runs:
        s = run.summary_as(PolicyAccuracySummary)
        if s.rm:
            groups.setdefault(kind.group_key(run), []).append(run)
        else:  # the plain policy (w = 0) is the reference row of every group on its policy and data
            plain.setdefault((repr(s.policy), repr(s.data)), []).append(run)
    for pk, items in plain.items():
        if not any(g[:2] == pk for g in groups):
            groups[kind.group_key(items[0])] = []
    return {key: members + plain.get(key[:2], [])[:1] for key, members in groups.items()}


def policy_accuracy_section(d: ReportData, kind: RunKind) -> str:
    runs = d.of_kind(kind)
    body = ["<h3>Policy accuracy</h3>"]
    if not runs:
        return body[0] + w.empty("No policy-accuracy runs (`prbench policy-accuracy`) under this folder.")
    for _, members in sorted(report_groups(kind, runs).items()):
        if not members:
            continue
        s = members[0].summary_as(PolicyAccuracySummary)
        body.append(f"<h4>policy {w.esc(s.policy)} · RM condition {w.esc(s.condition)} · w={w.esc(s.w)}"
                    f" · k={w.esc(s.k)} · mode {w.esc(s.mode)}</h4>")
        body.append(_group(members))
    return "".join(body)


def _group(members: list[Run]) -> str:
    head = ["RM", w.Cell("policy accuracy", "num"), w.Cell("length-normalised", "num"),
            w.Cell("plain policy", "num"), w.Cell("RM's own accuracy", "num"), w.Cell("same as plain", "num"),
            w.Cell("top-k coverage", "num"), w.Cell("pairs", "num")]
    rows, classes, bars = [], [], []
    plain_ref = None
    typed = [m.summary_as(PolicyAccuracySummary) for m in members]
    for s in sorted(typed, key=lambda s: (not s.rm, -(s.policy_accuracy or 0))):
        mm = s.metrics
        tot, nor = mm.policy_accuracy.total, mm.policy_accuracy.normalized
        plain, own = mm.plain_policy_accuracy.total, mm.rm_accuracy
        plain_ref = plain_ref if plain_ref is not None else plain.accuracy
        name = s.rm or "(no RM: plain policy)"
        rows.append([w.model_cell(name, w.is_control_spec(name), "" if s.rm else "reference"),
                     *(w.acc_cell(v.accuracy, v.ci_low, v.ci_high) for v in (tot, nor, plain, own)),
                     w.numc(w.pct(mm.agreement_with_plain.total)),
                     w.numc(w.pct(mm.mean_topk_coverage)), w.numc(w.fnum(mm.n))])
        classes.append("reference" if not s.rm else ("baseline" if w.is_control_spec(name) else ""))
        if s.rm:
            bars.append((name, (_pct(tot.accuracy), _pct(tot.ci_low), _pct(tot.ci_high))))
    return (w.figure(plots.hbars([b[0] for b in bars], [b[1] for b in bars], xlabel="policy accuracy (%)",
                               reference=None if plain_ref is None else 100 * plain_ref,
                               reference_label="plain policy"),
                   "policy accuracy per RM", "Guided policy accuracy per RM (95% CI); dashed: plain policy.")
            + w.table(head, rows, row_classes=classes,
                    caption="accuracy % with 95% CI; 'same as plain' = share of pairs where guidance did "
                            "not change the policy's preference"))


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x
