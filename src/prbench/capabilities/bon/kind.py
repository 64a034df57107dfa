"""Best-of-N runs (`prbench bon`): one downstream.json per RM with the curve over k."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prbench.capabilities.bon.command import bon
from prbench.capabilities.bon.driver import best_of_n
from prbench.capabilities.bon.report import bon_section
from prbench.capabilities.bon.settings import BonSettings
from prbench.capabilities.bon.stage import run_bon
from prbench.runkinds.base import MetaOptions, Run, Setting
from prbench.runkinds.downstream import BonSummary, DownstreamKind


class BonKind(DownstreamKind):
    name = "bon"
    settings_model = BonSettings
    driver = staticmethod(best_of_n)
    stage = run_bon
    command = staticmethod(bon)
    title = "Best-of-N"
    setting = "bon"
    short = "BoN"
    result_model = BonSummary
    report_section = staticmethod(bon_section)
    report_id = "bon"  # its own section, not a block of the downstream one
    value_definition = ("Best-of-N downstream score at k: mean over items of the exact expected rubric grade of the RM's "
                        "pick from a random k-subset ('expected'), or of its pick among the first k samples ('first_k')")

    def meta_settings(self, runs: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
        """One setting per k the group's RMs share (`bon_k="all"`) or only the largest (`"max"`)."""
        out = []
        for members in self.groups(runs, notes):
            first = next(iter(members.values()))
            ks = sorted(set.intersection(*(set(r.ds.k) for r in members.values())))
            if not ks:
                notes.append(f"BoN [{first.names.condition}]: the RMs share no k value")
                continue
            params = {**self.params(first), "curve": opts.bon_curve}
            sources = {rm: str(r.path / "downstream.json") for rm, r in sorted(members.items())}
            for kk in ks if opts.bon_k == "all" else ks[-1:]:
                vals = {}
                for rm, r in members.items():
                    table = r.ds.per_item if opts.bon_curve == "expected" else \
                        self.bon(r).per_item_first_k
                    if not isinstance(table, Mapping):
                        notes.append(f"{rm}: BoN file has no per-item {opts.bon_curve} values; left out")
                        continue
                    vals[rm] = {str(i): float(v[str(kk)]) for i, v in table.items() if str(kk) in v}
                label = self.label(first).replace("BoN", f"BoN k={kk}" + (" (max)" if kk == ks[-1] else ""), 1)
                out.append(Setting(label, "bon", vals, k=kk, max_k=kk == ks[-1], condition=first.names.condition,
                                   params=params, sources=sources))
        return out

    def bon(self, run: Run) -> BonSummary:
        """downstream.json as the Best-of-N model (oracle, random, first-k values typed)."""
        res = self.result(run)
        assert isinstance(res, BonSummary)
        return res


KIND = BonKind()
