"""The `personalize` study stage: train each personalized-RM method under the protocol and compare.

For every method in the section (default: the frozen-encoder ones, which train in seconds on
CPU), `prbench.train.methods.train_method` trains it on the seen users, measures seen vs unseen
users, the k-shot curve and the controls, and saves the final model under
`<out>/personalize/<method>/`. The stage writes `comparison.json` and `comparison.csv`
(one row per method: train, seen, unseen k = 0 and at the largest k, worst decile, gaps,
controls) and names the method with the best unseen-user accuracy at k = 0.
"""

from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

from prbench.errors import PrbenchError
from prbench.study.config import PersonalizeStage
from prbench.study.context import PersonalizeOutput

if TYPE_CHECKING:
    from prbench.study.context import PlannedRun, StudyContext

def _section(ctx: StudyContext) -> PersonalizeStage:
    return ctx.cfg.personalize or PersonalizeStage()


def plan_personalize(ctx: StudyContext) -> list[PlannedRun]:
    from prbench.study.context import PlannedRun

    return [PlannedRun("personalize", f"train {m} + protocol (local, no model calls)", 0, 0)
            for m in _section(ctx).methods]


def personalize(ctx: StudyContext) -> None:
    from pathlib import Path

    from prbench.data.pairs import load_training_pairs
    from prbench.train.methods import METHODS, spec_for, train_method
    from prbench.train.protocol import ProtocolConfig

    sec = _section(ctx)
    unknown = [m for m in sec.methods if m not in METHODS]
    if unknown:
        raise PrbenchError(f"personalize: unknown method(s) {unknown} (known: {', '.join(METHODS)})")
    data = sec.data or ctx.data
    if sec.data and not Path(sec.data).is_absolute() and (ctx.root / sec.data).exists():
        data = str(ctx.root / sec.data)
    pairs = load_training_pairs(data)  # the train part: test pairs are what the benchmark scores
    pcfg = ProtocolConfig(condition=sec.condition, holdout_users=sec.holdout_users, holdout_items=sec.holdout_items,
                          ks=tuple(sec.ks), draws=sec.draws, seed=ctx.cfg.seed, top_k=ctx.cfg.top_k,
                          retriever=ctx.cfg.retriever)
    rows = []
    for method in sec.methods:
        folder = ctx.path("personalize", method)
        options = {"seed": ctx.cfg.seed, **sec.options.get(method, {})}
        _, report = train_method(method, pairs, folder, options, protocol=pcfg)
        rows.append({"method": method, "spec": spec_for(method, folder),
                     **(report.headline.model_dump() if report.headline else {}),
                     "warnings": " | ".join(report.warnings) or report.skipped or ""})
    scored = [r for r in rows if r.get("unseen_k0") is not None]
    best = max(scored, key=lambda r: r["unseen_k0"])["method"] if scored else None
    out = ctx.path("personalize")
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps({"best_unseen_k0": best, "rows": rows}, indent=1, default=str),
                                         encoding="utf-8")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with (out / "comparison.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    ctx.outputs.personalize = PersonalizeOutput(json=str(out / "comparison.json"), best_unseen_k0=best)
