"""The shared base of kinds that write a `downstream.json` (one RM, one setting, per-item values).

A new downstream metric needs only a subclass naming its setting (and, when its values are not
`per_item` at the largest k, its own `item_values`): meta groups its runs by `group_key`, makes
one setting per group and bootstraps over the per-item values; the report lists it.
"""

from __future__ import annotations

from collections.abc import Sequence

from prbench.runkinds.base import MetaOptions, Run, RunKind, Setting

DEFAULT_GROUP = ("condition", "policy", "w", "candidates_k", "chunk", "temperature", "reward_norm", "metric")


class DownstreamKind(RunKind):
    """A downstream setting read from downstream.json files."""

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
