"""Eval runs (`prbench eval`): the benchmark side of meta, the leaderboard's rows, `compare`'s inputs.

The kind names its settings, driver, stage, command and report block by direct reference."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.capabilities.eval.command import EVAL_COMMAND
from prbench.capabilities.eval.settings import EvalSettings
from prbench.capabilities.eval.stage import run_eval
from prbench.errors import DataError
from prbench.evaluation.evaluate import evaluate
from prbench.report.evals import leaderboard_section
from prbench.runkinds.base import RECORDS, EEEItem, EEEPart, Run, RunKind, mismatch, run_credits
from prbench.stats.metrics import collapse_items
from prbench.store.records import EvalSummary, typed_record
from prbench.store.runs import regular_file

OUTCOME = {1.0: "chosen", 0.5: "tie", 0.0: "rejected"}


class EvalKind(RunKind):
    name = "eval"
    settings_model = EvalSettings
    driver = staticmethod(evaluate)
    stage = run_eval
    command = EVAL_COMMAND
    title = "eval run"
    role = "benchmark"
    records_file = True
    summary_model = EvalSummary
    record_model = staticmethod(typed_record)  # pointwise or pairwise by the record's own fields
    group_fields = ("data", "condition")  # a benchmark: one data set under one condition
    report_section = staticmethod(leaderboard_section)
    report_id = "leaderboard"

    def check(self, run: Run) -> None:
        """The summary must be what its records give: every figure a reader publishes (a cut or edited file is
        refused). Counts and accuracy first (the plainest message), then the rest recomputed."""
        super().check(run)
        config = run.path / "config.json"
        if not regular_file(config, "rerun the eval that wrote this run"):  # the run's identity is unknown
            raise DataError(str(config), None, None, "missing: which options and settings this run was scored "
                                                     "with is unknown (it would be taken for another model); rerun "
                                                     "the eval that wrote this run")
        s = run.summary_as(EvalSummary)
        items = collapse_items(run.items)  # what the driver summarised: one credit per multi-response item
        credits = [float(c) for c in _credits(items)]
        where = str(run.path / "summary.json")
        fix = f"the summary does not match {RECORDS}; delete summary.json and rerun the eval (it is recomputed)"
        if s.n_total != len(run.items):
            raise DataError(where, None, "n_total", f"says {s.n_total} pairs but {RECORDS} holds "
                                                    f"{len(run.items)}; {fix}")
        if s.metrics.n_total is not None and s.metrics.n_total != len(items):
            raise DataError(where, None, "metrics.n_total", f"says {s.metrics.n_total} items but {RECORDS} holds "
                                                            f"{len(items)}; {fix}")
        if s.metrics.n != len(credits):
            raise DataError(where, None, "metrics.n", f"says {s.metrics.n} validly scored pairs but {RECORDS} "
                                                      f"holds {len(credits)}; {fix}")
        mean = math.fsum(credits) / len(credits) if credits else None
        for name, value in (("accuracy", s.accuracy), ("metrics.accuracy", s.metrics.accuracy)):
            if (value is None or mean is None) and value != mean or \
                    value is not None and mean is not None and abs(value - mean) > 1e-9:
                raise DataError(where, None, name, f"says {value} but the credits in {RECORDS} give {mean}; {fix}")
        self._recompute(run, s, where, fix)

    @staticmethod
    def _recompute(run: Run, s: EvalSummary, where: str, fix: str) -> None:
        """CIs, per category, per user, ties, invalid counts, length bias...: recomputed by the functions that wrote
        them, with the run's seed and resample count, so they agree bit for bit; the first that differs is named."""
        from prbench.evaluation.evaluate import summarize
        from prbench.train.protocol import user_breakdown

        written = run._written_records  # the records as the driver wrote them: what its functions summarised
        n_boot = _n_boot(run, s)
        metrics = summarize(written, seed=s.seed, n_boot=n_boot)
        fresh: dict[str, Any] = {"metrics": metrics, "n": metrics["n"]}
        stored: dict[str, Any] = {"metrics": s.metrics.model_dump(exclude_unset=True), "n": s.n}
        per_user = s.per_user.model_dump(exclude_unset=True) if s.per_user is not None else None
        if "per_user" in s.model_fields_set:  # seen / unseen need the RM's training users: their sums are checked below
            fresh["per_user"] = user_breakdown(written, None, seed=s.seed, n_boot=n_boot)
            stored["per_user"] = {"users": per_user["users"]} if per_user and "users" in per_user else \
                ({} if per_user is not None else None)
        found = mismatch(stored, fresh) or _seen_unseen(run, per_user or {})
        if found is not None:
            name, said, gives = found
            raise DataError(where, None, name, f"says {said} but {RECORDS} gives {gives}; {fix}")

    def credits(self, run: Run) -> dict[str, float]:
        """Item id -> credit for every validly scored pair."""
        return run_credits(run)

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """Accuracy over validly scored pairs; one instance per pair (credit 1 chosen preferred, 0.5 tie, 0 rejected)."""
        s = run.summary_as(EvalSummary)
        m = s.metrics
        if m.accuracy is None:
            return []
        items = [EEEItem(rec.id, rec.credit, rec.credit == 1.0, OUTCOME[rec.credit], "chosen",
                         {"category": rec.category or "?", "condition": s.condition})
                 for rec in run.items if rec.credit is not None]
        return [EEEPart(
            result_id=f"accuracy:{s.condition}", name=f"{s.data} [{s.condition}]", metric_id="accuracy",
            metric_name="preference accuracy",
            description="share of preference pairs where the reward model prefers the user's chosen response "
                        "(ties 0.5), under the input condition named in the evaluation name",
            score=m.accuracy, ci=(m.ci_low, m.ci_high), n=m.n, bounds=(0.0, 1.0),
            source="examples.jsonl credit", items=items,
            extraction_method="pairwise verdict" if s.kind == "pairwise" else "score(chosen) vs score(rejected)",
            details={"n_invalid": str(m.n_invalid), "n_total": str(s.n_total), "rm_kind": s.kind,
                     "condition": s.condition})]


def _credits(items: list[dict[str, Any]]) -> list[float]:
    """The credits of the validly scored items (`collapse_items`' per-item rows, computed here, not read)."""
    return [c for item in items if (c := item.get("credit")) is not None]


def _n_boot(run: Run, s: EvalSummary) -> int:
    """The bootstrap resamples behind the summary's CIs: its own record, else the run's config, else the default."""
    for said in (s.metrics.n_boot, run.config.get("n_boot")):  # config.json: what was asked, any keys
        if isinstance(said, int) and not isinstance(said, bool) and said >= 1:
            return said
    return 1000


class _Users(BaseModel):
    """One part of an eval summary's `per_user` (`prbench.train.protocol.user_breakdown`)."""

    model_config = ConfigDict(extra="allow")
    n_users: int = 0
    n: int = 0
    pair_accuracy: float | None = None


class _PerUser(BaseModel):
    model_config = ConfigDict(extra="allow")
    users: _Users | None = None
    seen: _Users | None = None
    unseen: _Users | None = None


def _seen_unseen(run: Run, stored: Any) -> tuple[str, Any, Any] | None:
    """Seen and unseen users (a split only the RM knows) must add up to the records: pairs, users, accuracy."""
    try:
        pu = _PerUser.model_validate(stored)
    except ValidationError as exc:
        return f"per_user.{'.'.join(map(str, exc.errors()[0]['loc']))}", "a malformed value", "numbers"
    if pu.seen is None or pu.unseen is None:
        return None
    valid = [rec for rec in run.items if rec.credit is not None and getattr(rec, "user_id", None)]  # an extra
    parts = (pu.seen, pu.unseen)
    if (n := pu.seen.n + pu.unseen.n) != len(valid):
        return "per_user.seen.n", n, len(valid)
    n_users = len({rec.user_id for rec in valid})
    if (said := pu.seen.n_users + pu.unseen.n_users) != n_users:
        return "per_user.seen.n_users", said, n_users
    total = math.fsum(p.pair_accuracy * p.n for p in parts if p.pair_accuracy is not None)
    credits = math.fsum(rec.credit for rec in valid)
    if abs(total - credits) > 1e-9 * max(1, len(valid)):
        return "per_user.seen.pair_accuracy", total / max(n, 1), credits / max(len(valid), 1)
    return None


KIND = EvalKind()
