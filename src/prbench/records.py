"""Typed run summaries and per-example records, with a format version and a run kind.

Every summary.json a driver writes carries `"format": FORMAT` and `"run": <kind>`, a name in
the run-kind registry (`prbench.registry.RUNKINDS`, plug-ins included); readers open runs through
`prbench.runkinds.open_run`, which dispatches on it, never on which keys happen to exist. Folders written before the stamp existed (format 0, this version's layout) get
their kind from `legacy_kind`, the one place that still recognises a summary by its keys.

Per-example records keep their on-disk shape (so a run's bytes do not change); the typed
models give readers one view of them, e.g. `truncated_any` whatever kind wrote the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.errors import DataError

FORMAT = 1
RunKind = Literal["eval", "policy-accuracy", "rgd", "icl", "sample", "plan"]
RUN_KINDS: tuple[str, ...] = RunKind.__args__  # type: ignore[attr-defined]


def _known(kind: Any) -> bool:
    from prbench.registry import RUNKINDS

    return isinstance(kind, str) and kind in RUNKINDS


def stamp(kind: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its format version and run kind first (what every driver writes)."""
    if not _known(kind):
        raise ValueError(f"unknown run kind {kind!r}")
    return {"format": FORMAT, "run": kind, **{k: v for k, v in summary.items() if k not in ("format", "run")}}


def legacy_kind(s: dict[str, Any]) -> str | None:
    """The kind of a summary written before summaries were stamped (format 0)."""
    if "policy" in s and "policy_accuracy" in s and isinstance(s.get("metrics"), dict):
        return "policy-accuracy"
    if "policy" not in s and "condition" in s and ("spec" in s or "model" in s) \
            and isinstance(s.get("metrics"), dict) and "accuracy" in s["metrics"]:
        return "eval"
    if s.get("method") == "icl":
        return "icl"
    if "policy" in s and "w" in s and "n_generated" in s:
        return "rgd"
    return None


def run_kind(s: Any) -> str | None:
    """`"eval"`, `"policy-accuracy"`, `"rgd"`, `"icl"`, ... or None for a summary that is no run's."""
    if not isinstance(s, dict):
        return None
    if "run" in s and "format" in s:
        return s["run"] if _known(s["run"]) else None
    return legacy_kind(s)


# -- typed views ----------------------------------------------------------------------------
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)  # summaries carry many facts beyond these


class EvalMetrics(_Open):
    accuracy: float | None
    n: int
    n_invalid: int
    ci_low: float | None = None
    ci_high: float | None = None


class CostSummary(_Open):
    """The `cost` object of a run that sent API requests (`prbench.cost`): tokens from the replies' usage, dollars
    at the dated list prices (None when no price table names the model)."""

    usd: float | None
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    requests: int
    batch: bool
    prices_as_of: str | None = None
    priced_as: str | None = None
    max_usd: float | None = None


class EvalSummary(_Open):
    """What every reader of an eval run relies on."""

    run: Literal["eval"] = "eval"
    format: int = 0
    model: str
    spec: str | None = None
    data: str
    condition: str
    seed: int = 0
    kind: Literal["pointwise", "pairwise"]
    accuracy: float | None
    n: int
    n_total: int
    metrics: EvalMetrics
    cost: CostSummary | None = None  # API runs only


class PolicyAccuracySummary(_Open):
    run: Literal["policy-accuracy"] = "policy-accuracy"
    format: int = 0
    policy: str
    condition: str
    policy_accuracy: float | None
    metrics: dict[str, Any]


class PolicyAccuracyRecord(_Open):
    """One pair of a policy-accuracy run: the guided policy's credit (total and length-normalised log-likelihood)."""

    id: str
    credit_total: float | None
    credit_norm: float | None
    plain_credit_total: float | None = None
    plain_credit_norm: float | None = None
    rm_credit: float | None = None  # the RM's own full-text preference, when it scored both texts


class GenerationSummary(_Open):
    """RGD and ICL runs: generated texts scored against gold answers and rubrics."""

    run: Literal["rgd", "icl"]
    format: int = 0
    policy: str
    n_items: int
    n_generated: int


SUMMARY_MODELS: dict[str, type[_Open]] = {"eval": EvalSummary, "policy-accuracy": PolicyAccuracySummary,
                                          "rgd": GenerationSummary, "icl": GenerationSummary}


def typed_summary(s: dict[str, Any], file: str | Path = "summary.json", model: type[BaseModel] | None = None) -> Any:
    """The summary as its kind's model; a field that is missing or wrong is named with the file."""
    kind = run_kind(s)
    model = model or SUMMARY_MODELS.get(kind or "")
    if model is None:
        raise DataError(str(file), None, "run", f"not a run summary prbench can read (kind {kind!r})")
    try:
        return model.model_validate({**s, "run": kind} if kind else s)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise DataError(str(file), None, field, f"{err['msg']} (re-run with this prbench version)") from None


class PointwiseRecord(_Open):
    """One pair scored by a pointwise RM: a score per side."""

    id: str
    category: str | None = None
    condition: str | None = None
    score_chosen: float | None
    score_rejected: float | None
    truncated: dict[str, bool]
    credit: float | None = None
    invalid: str | None = None

    @property
    def truncated_any(self) -> bool:
        return any(self.truncated.values())


class PairwiseRecord(_Open):
    """One pair judged by a pairwise RM: one verdict per position shown."""

    id: str
    category: str | None = None
    condition: str | None = None
    chosen_position: Literal["A", "B"]
    verdicts: list[str | None]
    sides: list[str | None]
    truncated: bool = False
    credit: float | None = None
    invalid: str | None = None

    @property
    def truncated_any(self) -> bool:
        return self.truncated


def typed_record(rec: dict[str, Any], file: str | Path = "examples.jsonl", line: int | None = None):
    """A per-example eval record as its model (pairwise when it holds verdicts)."""
    model = PairwiseRecord if "verdicts" in rec else PointwiseRecord
    try:
        return model.model_validate(rec)
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(str(file), line, ".".join(str(p) for p in err["loc"]), err["msg"]) from None
