"""The shared base of kinds that write a `downstream.json` (one RM, one setting, per-item values).

A new downstream metric needs only a subclass naming its setting (and, when its values are not
`per_item` at the largest k, its own `item_values`): meta groups its runs by `group_key`, makes
one setting per group and bootstraps over the per-item values; the report lists it.
"""

from __future__ import annotations

from collections.abc import Sequence

from prbench.downstream.results import DEFAULT_SCALE
from prbench.runkinds.base import EEEItem, EEEPart, MetaOptions, Run, RunKind, Setting

DEFAULT_GROUP = ("condition", "policy", "w", "candidates_k", "chunk", "temperature", "reward_norm", "metric")


class DownstreamKind(RunKind):
    """A downstream setting read from downstream.json files (validated field by field by
    `prbench.downstream.results.validate` into a `DownstreamResult`: the kind's typed summary)."""

    role = "downstream"
    group_fields = DEFAULT_GROUP
    label_fields = (("w", "w"), ("k", "candidates_k"), ("metric", "metric"))
    report_section = "prbench.report.downstream:downstream_section"

    def group_key(self, run: Run) -> tuple:
        d = run.downstream
        return (d.setting, d.grader, d.scale, tuple(sorted((f, repr(run.get(f))) for f in self.group_fields)))

    def item_values(self, run: Run, opts: MetaOptions) -> dict[str, float]:
        """Item id -> the outcome meta ranks RMs by (the value at the largest k)."""
        return run.downstream.item_values()

    def params(self, run: Run) -> dict:
        d = run.downstream
        return {"grader": d.grader, "scale": d.scale,
                **{f: run.get(f) for f in self.group_fields if run.get(f) is not None}}

    def groups(self, runs: Sequence[Run], notes: list[str]) -> list[dict[str, Run]]:
        """Runs by setting (group key), then by RM; an RM twice in a setting keeps the later run, with a note."""
        grouped: dict[tuple, dict[str, Run]] = {}
        for run in runs:
            members = grouped.setdefault(self.group_key(run), {})
            if run.key in members:
                notes.append(f"{self.name}: {run.key} appears twice ({members[run.key].path / 'downstream.json'} and "
                             f"{run.path / 'downstream.json'}); using {run.path / 'downstream.json'}")
            members[run.key] = run
        return [members for _, members in sorted(grouped.items(), key=lambda kv: str(kv[0]))]

    def meta_settings(self, runs: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
        out = []
        for members in self.groups(runs, notes):
            first = next(iter(members.values()))
            out.append(Setting(self.label(first), self.setting or self.name,
                               {rm: self.item_values(r, opts) for rm, r in members.items()},
                               condition=first.get("condition"), params=self.params(first),
                               sources={rm: str(r.path / "downstream.json") for rm, r in sorted(members.items())}))
        return out

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """One result per k of the curve (k = 1 for one value per item), with the per-item values at that k."""
        d = run.downstream
        if d is None:
            return []
        top = 2.0 if d.scale == DEFAULT_SCALE else None
        name = self.label(run)
        out = []
        for i, k in enumerate(d.k):
            items = [EEEItem(item, float(vals[str(k)]), top is not None and vals[str(k)] >= top,
                             f"{vals[str(k)]:g}", "the scale's maximum" if top is not None else d.scale,
                             {"setting": d.setting, "k": str(k)})
                     for item, vals in d.per_item.items() if str(k) in vals]
            out.append(EEEPart(
                result_id=f"{d.setting}:k={k}", name=name if len(d.k) == 1 else f"{name} k={k}",
                metric_id=f"{d.setting}_expected", metric_name=f"{self.short or self.name} ({d.scale})",
                description=self.value_definition or f"{d.setting}: mean per-item value ({d.scale})",
                score=float(d.expected[i]), ci=(d.ci_low[i], d.ci_high[i]), n=len(items), bounds=(0.0, top),
                source=f"downstream.json per_item[id][{k}]", extraction_method=f"grader {d.grader}", items=items,
                details={"grader": d.grader, "scale": d.scale, "first_k": f"{d.first_k[i]:g}"},
                source_details={k2: str(v) for k2, v in d.extra.items() if k2 in ("condition", "policy", "samples")}))
        return out
