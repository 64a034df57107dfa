"""Policy-accuracy runs (`prbench policy-accuracy`): does the RGD-adapted policy prefer the chosen answer?

An ordinary downstream kind: its group key (8 fields) is the one definition of a setting, used
by meta and the report alike. Per-item values come from the run's records (`credit_total` or
`credit_norm`, meta's `pa_metric`); the RM's own full-text preference (`rm_credit`) feeds paper
B's in-run Kendall tau. A run without an RM (w = 0, the plain policy) is the report's reference
row, never ranked.
"""

from __future__ import annotations

from collections.abc import Sequence

from prbench.capabilities.policy_accuracy.command import policy_accuracy as policy_accuracy_command
from prbench.capabilities.policy_accuracy.driver import policy_accuracy
from prbench.capabilities.policy_accuracy.report import policy_accuracy_section
from prbench.capabilities.policy_accuracy.settings import PolicyAccuracySettings
from prbench.capabilities.policy_accuracy.stage import run_policy_accuracy
from prbench.errors import DataError
from prbench.runkinds.base import EEEItem, EEEPart, MetaOptions, Run, RunKind, Setting
from prbench.store.records import PolicyAccuracyRecord, PolicyAccuracySummary


class PolicyAccuracyKind(RunKind):
    name = "policy-accuracy"
    settings_model = PolicyAccuracySettings
    driver = staticmethod(policy_accuracy)
    stage = run_policy_accuracy
    command = staticmethod(policy_accuracy_command)
    title = "policy accuracy"
    role = "downstream"
    setting = "policy_accuracy"
    records_file = True
    summary_model = PolicyAccuracySummary
    record_model = PolicyAccuracyRecord
    group_fields = ("policy", "data", "condition", "w", "k", "mode", "reward_norm", "repetition_penalty")
    label_fields = (("w", "w"), ("k", "k"), ("mode", "mode"))
    short = "policy accuracy"
    value_definition = ("share of pairs where the RGD-adapted policy's guided log-likelihood of chosen exceeds "
                        "rejected's (ties 0.5); 'total' sums token log-probs, 'normalized' averages them")
    report_section = staticmethod(policy_accuracy_section)

    def check(self, run: Run) -> None:
        """The summary must count the pairs its records hold (a cut examples.jsonl is refused)."""
        super().check(run)
        s = run.summary_as(PolicyAccuracySummary)
        if s.metrics.n != len(run.items):
            raise DataError(str(run.path / "summary.json"), None, "metrics.n",
                            f"says {s.metrics.n} pairs but examples.jsonl holds {len(run.items)}; delete summary.json "
                            "and rerun the command that wrote this run (it is recomputed)")

    def summary(self, run: Run) -> PolicyAccuracySummary:
        return run.summary_as(PolicyAccuracySummary)

    def credits(self, run: Run, field: str) -> dict[str, float]:
        return {rec.id: float(v) for rec in run.items if (v := getattr(rec, field)) is not None}

    def meta_settings(self, runs: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
        groups: dict[tuple, dict[str, Run]] = {}
        for run in runs:
            rm = self.summary(run).rm
            if not rm:
                notes.append(f"{run.path}: policy accuracy without an RM (w = 0, the plain policy) is not ranked")
                continue
            groups.setdefault(self.group_key(run), {})[rm] = run
        credit_key = "credit_total" if opts.pa_metric == "total" else "credit_norm"
        out = []
        for _, members in sorted(groups.items()):
            first = next(iter(members.values()))
            own = {rm: self.credits(r, "rm_credit") for rm, r in members.items()}
            params = self.values(first, self.group_fields)
            params["value"] = f"policy accuracy ({opts.pa_metric})"
            out.append(Setting(self.label(first), self.setting, {rm: self.credits(r, credit_key)
                                                                 for rm, r in members.items()},
                               condition=self.summary(first).condition, params=params,
                               sources={rm: str(r.path) for rm, r in sorted(members.items())},
                               rm_credit={rm: v for rm, v in own.items() if v}))
        return out

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Policy accuracy (total log-likelihood) of a guided run; one instance per pair."""
        s = self.summary(run)
        total = s.metrics.policy_accuracy.total
        if not s.rm or total.accuracy is None:
            return []  # the plain policy (no RM) is a reference, not an RM's result
        items = [EEEItem(i, v, v == 1.0, {1.0: "chosen", 0.5: "tie", 0.0: "rejected"}.get(v, f"{v:g}"), "chosen",
                         {"condition": s.condition}) for i, v in self.credits(run, "credit_total").items()]
        return [EEEPart(
            result_id=f"policy_accuracy:{s.condition}", name=self.label(run), metric_id="policy_accuracy",
            metric_name="policy accuracy (total log-likelihood)", description=self.value_definition,
            score=total.accuracy, ci=(total.ci_low, total.ci_high), n=len(items),
            bounds=(0.0, 1.0), source="examples.jsonl credit_total", extraction_method="guided log-likelihood",
            items=items, details={"policy": s.policy, "w": str(s.w), "k": str(s.k), "mode": str(s.mode)})]


KIND = PolicyAccuracyKind()
