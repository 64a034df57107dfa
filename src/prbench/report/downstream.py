"""The report's RL / RGD / policy-accuracy section: one block per downstream kind."""

from __future__ import annotations

from prbench.report.data import ReportData
from prbench.report.widgets import (
    Cell,
    empty,
    esc,
    fnum,
    is_control_spec,
    model_cell,
    numc,
    pct,
    section,
    table,
    text,
)
from prbench.runkinds import RunKind, kinds
from prbench.runkinds.downstream import DownstreamKind
from prbench.store.records import GenerationSummary

EXPLAIN = ("RL: the policy trained with each RM as reward, then graded on held-out items. RGD (reward-guided "
           "decoding, ARGS-style): a frozen policy steered token by token by the RM, scored by rubric grade or "
           "gold-answer metric. Policy accuracy (paper B): share of benchmark pairs where the RGD-adapted policy "
           "gives the chosen answer a higher guided log-likelihood than the rejected one (ties 0.5); the plain "
           "policy's own preference is the reference. CIs: 95% bootstrap over items.")
_FIRST = ("rl", "rgd")  # built-in blocks first, plug-in kinds by name, policy accuracy last


def rl_rgd_section(d: ReportData) -> str:
    """One block per downstream kind shown here (every one without a section of its own, as Best-of-N has)."""
    blocks = {k: block for k in kinds() if k.role == "downstream" and k.report_id is None
              and (block := k.report_block() or (downstream_section if isinstance(k, DownstreamKind) else None))}
    order = sorted(blocks, key=lambda k: (k.name == "policy-accuracy", _FIRST.index(k.name) if k.name in _FIRST else 9,
                                          k.name))
    return section("rl-rgd", "RL, RGD and policy accuracy", EXPLAIN, "".join(blocks[k](d, k) for k in order))


def downstream_section(d: ReportData, kind: RunKind) -> str:
    """A table of one downstream.json kind: RM, condition, policy, score with CI, items (RGD: guidance columns)."""
    setting = kind.setting or kind.name
    guided = kind.name == "rgd"
    title = {"rl": "RL fine-tuning", "rgd": "Reward-guided decoding"}.get(kind.name, kind.title or kind.name)
    res = [(r, r.downstream, kind.result(r)) for r in d.of_kind(kind)
           if isinstance(kind, DownstreamKind) and r.downstream is not None]
    if not res:
        return f"<h3>{esc(title)}</h3>" + empty(f"No {setting.upper()} results (downstream.json with setting "
                                                f"'{setting}').")
    head = ["RM", "condition", "policy", *([Cell("w / k", "num", "reward weight / candidate tokens per step")]
                                           if guided else []), "metric / grader",
            Cell("score", "num"), Cell("items", "num")]
    if guided:
        head += [Cell("tokens changed", "num", "share of decision points where guidance changed the policy's "
                                               "greedy token"),
                 Cell("ROUGE-1", "num", "against the user's own answer, when items carry one")]
    rows, classes = [], []
    for run, r, x in sorted(res, key=lambda fr: -fr[1].expected[-1]):
        metric = x.metric
        rows.append([model_cell(r.rm, is_control_spec(r.rm)), text(x.condition or "–"),
                     text(x.policy or "–", "nowrap"),
                     *([numc(f"{fnum(x.w, 2)} / {fnum(x.candidates_k)}")] if guided else []),
                     text(f"{metric}: {r.grader}" if metric else r.grader),
                     numc(f"{r.expected[-1]:.3f}" + (f'<span class="ci">[{fnum(r.ci_low[-1])}, {fnum(r.ci_high[-1])}]'
                                                     "</span>" if r.ci_low[-1] is not None else "")),
                     numc(fnum(r.n_items))])
        if guided:
            gen = run.typed if isinstance(run.typed, GenerationSummary) else None
            gold = gen.gold.metrics if gen is not None and gen.gold is not None else {}
            rows[-1] += [numc(pct(gen.changed_share if gen else None)),
                         numc(fnum(gold["rouge1"].mean if "rouge1" in gold else None))]
        classes.append("baseline" if is_control_spec(r.rm) else "")
    scales = sorted({r.scale for _, r, _ in res})
    return f"<h3>{esc(title)}</h3>" + table(head, rows, row_classes=classes, caption="score: " + "; ".join(scales)
                                            + " (mean over items, 95% bootstrap CI)")
