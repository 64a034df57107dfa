"""Typed run summaries and per-example records, with a format version and a run kind.

Every summary.json a driver writes carries `"format": FORMAT` and `"run": <kind>`, a name in
the run-kind registry (`prbench.registry.RUNKINDS`, plug-ins included); readers open runs through
`prbench.runkinds.open_run`, which dispatches on it, never on which keys happen to exist. Folders written before the stamp existed (format 0, this version's layout) get
their kind from `legacy_kind`, the one place that still recognises a summary by its keys.

`typed_summary` is the one reader of a summary's raw dict: it upgrades a format-0 folder (kind
from `legacy_kind`) and validates every summary against its kind's model, so every other reader
uses the model's attributes, never `.get` on a dict. A summary claiming a newer format is read
with a note (`newer_format`).

Per-example records keep their on-disk shape (so a run's bytes do not change); the typed
models give readers one view of them, e.g. `truncated_any` whatever kind wrote the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer

from prbench.errors import DataError
from prbench.registry import RUNKINDS

FORMAT = 1


def _known(kind: Any) -> bool:
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
class OptionalFields(BaseModel):
    """A model whose `optional` fields are left out of its JSON when unset (None): the shape a writer always had,
    kept by the typed results that replaced its dicts (meta's parts, a study's outputs)."""

    optional: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> Any:
        out = handler(self)
        for name in self.optional:
            if name in out and out[name] is None:
                del out[name]
        return out


class _Open(BaseModel):
    """Summaries carry many facts beyond the ones readers use; NaN and infinity are refused (not JSON)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class Accuracy(_Open):
    """`metrics.accuracy_summary`: accuracy (ties 0.5) with its bootstrap CI, over `n` items."""

    accuracy: float | None = Field(default=None, ge=0.0, le=1.0)
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = Field(default=None, ge=0)


class CategoryStats(_Open):
    groups: dict[str, Accuracy] = {}
    macro: Accuracy | None = None
    micro: Accuracy | None = None


class PairwiseStats(_Open):
    """A pairwise judge's position diagnostics."""

    accuracy_chosen_A: float | None = None
    accuracy_chosen_B: float | None = None
    share_verdict_A: float | None = None
    parse_failures: int | None = None
    position_consistency: float | None = None


class LengthBias(_Open):
    prefers_longer: float | None = None
    n: int | None = None


class FormatScore(_Open):
    """A benchmark's own headline by its format's rule (`prbench.formats.format_score`: RewardBench sections...)."""

    name: str
    value: float | None = None
    upstream: str = "its format"  # who computes it this way
    accuracy_is: str = "prbench"  # what prbench's accuracy is beside it


class EvalMetrics(Accuracy):
    """An eval run's `metrics` (`prbench.evaluation.scoring.summarize`)."""

    n: int = Field(ge=0)
    n_invalid: int = Field(default=0, ge=0)
    n_total: int | None = Field(default=None, ge=0)
    n_boot: int | None = None  # bootstrap resamples behind the CIs (a reader recomputes them: runkinds.eval)
    ties: int | None = None
    truncated_inputs: int | None = None
    mean_margin: float | None = None
    categories: CategoryStats | None = None
    length_bias: LengthBias | None = None
    pairwise: PairwiseStats | None = None
    format_score: FormatScore | None = None


class Gain(_Open):
    diff: float
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None


class LengthControl(_Open):
    prefers_longer: float | None = None
    p_value: float | None = None


class PositionControl(_Open):
    applicable: bool = False
    share_A: float | None = None
    p_value: float | None = None


class ValidityCard(_Open):
    """`prbench.evaluation.validity.card`: a condition's gain over its wrong-user control, and the controls."""

    condition: str
    control: str
    n_shared: int
    gain: Gain | None = None
    length: LengthControl = LengthControl()
    position: PositionControl = PositionControl()
    context_share: float | None = None


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


class Capabilities(_Open):
    is_control: bool = False


class SequentialStop(_Open):
    """Where a sequential run (`--until`, `prbench.evaluation.sequential`) stopped, under which rule, and why."""

    rule: str
    n_used: int = Field(ge=0)
    n_items: int = Field(ge=0)
    stopped: str
    level: float | None = None
    method: str = ""


class UserSpread(_Open):
    """Accuracy per person (`prbench.train.protocol.distribution`): mean over people with a CI over people."""

    n_users: int = Field(default=0, ge=0)
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class PeoplePart(UserSpread):
    """The people of a run an RM was (`seen`) or was not (`unseen`) trained on, and their pairs' accuracy."""

    pair_accuracy: float | None = None
    n: int = Field(default=0, ge=0)


class PerUser(_Open):
    """An eval run's `per_user` (`prbench.train.protocol.user_breakdown`): seen/unseen only for trained RMs."""

    users: UserSpread | None = None
    seen: PeoplePart | None = None
    unseen: PeoplePart | None = None
    warning: str | None = None


class RunSettings(_Open):
    """The run settings that change an eval run's numbers beyond its model, data, condition and seed
    (`prbench.evaluation.evaluate`; runs written before the summary carried them read theirs from config.json)."""

    top_k: int | None = None
    retriever: str | None = None
    max_context_chars: int | None = None
    planner_file: str | None = None
    both_orders: bool = False
    split: str | None = None
    categories: list[str] | None = None
    format: str | None = None
    limit: int | None = None  # a smaller --limit reads the first items of a larger run (its n says)


class SeededOrder(_Open):
    """The item order of a run scored in one seeded order (`--until`, `seeded_order`): what a larger limit extends."""

    kind: str
    seed: int | None = None
    n_items: int | None = Field(default=None, ge=0)  # the benchmark's items in that order


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
    accuracy: float | None = Field(ge=0.0, le=1.0)
    n: int = Field(ge=0)
    n_total: int = Field(ge=0)
    metrics: EvalMetrics
    cost: CostSummary | None = None  # API runs only
    validity: ValidityCard | None = None  # the personalization validity card, when its control ran
    sequential: SequentialStop | None = None  # `--until` runs: the rule, the items used and why it stopped
    order: SeededOrder | None = None  # runs in a seeded order (what `--until` grows)
    per_user: PerUser | None = None  # accuracy per person; seen vs unseen people for a trained RM
    settings: RunSettings | None = None  # what changes the numbers (absent from runs written before it was)
    capabilities: Capabilities | None = None  # what the RM kind can do (runs before they were recorded: none)
    model_info: dict[str, Any] = {}  # free-form per RM kind (fingerprint, prompt and template hashes)
    versions: dict[str, str | None] = {}
    wall_time_s: float | None = None

    @property
    def rm(self) -> str:
        """The RM this run belongs to: its spec, else its model name."""
        return self.spec or self.model


class TotalNormalized(_Open):
    """A policy-accuracy figure twice: over total and over length-normalised log-likelihood (None: no pair)."""

    total: Accuracy = Accuracy()
    normalized: Accuracy = Accuracy()

    @field_validator("total", "normalized", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


class Agreement(_Open):
    total: float | None = None
    normalized: float | None = None


class PolicyAccuracyMetrics(_Open):
    """`prbench.capabilities.policy_accuracy.driver.summarize`."""

    policy_accuracy: TotalNormalized
    plain_policy_accuracy: TotalNormalized = TotalNormalized()
    rm_accuracy: Accuracy = Accuracy()
    agreement_with_plain: Agreement = Agreement()
    mean_topk_coverage: float | None = None
    n: int = Field(default=0, ge=0)

    @field_validator("rm_accuracy", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


class PolicyAccuracySummary(_Open):
    run: Literal["policy-accuracy"] = "policy-accuracy"
    format: int = 0
    policy: str
    rm: str | None = None
    data: str | None = None
    condition: str
    w: float | None = None
    k: int | None = None
    mode: str | None = None
    reward_norm: str | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    wall_time_s: float | None = None
    policy_accuracy: float | None
    policy_accuracy_normalized: float | None = None
    plain_policy_accuracy: float | None = None
    plain_policy_accuracy_normalized: float | None = None
    resumed_from: int = 0  # pairs an earlier invocation had scored
    metrics: PolicyAccuracyMetrics


class PolicyAccuracyRecord(_Open):
    """One pair of a policy-accuracy run: the guided policy's credit (total and length-normalised log-likelihood)."""

    id: str
    credit_total: float | None
    credit_norm: float | None
    plain_credit_total: float | None = None
    plain_credit_norm: float | None = None
    rm_credit: float | None = None  # the RM's own full-text preference, when it scored both texts


class GoldMetric(_Open):
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class GoldScores(_Open):
    metrics: dict[str, GoldMetric] = {}


class GenerationSummary(_Open):
    """RGD and ICL runs: generated texts scored against gold answers and rubrics."""

    run: Literal["rgd", "icl"]
    format: int = 0
    policy: str
    rm: str | None = None  # the guiding RM (RGD)
    data: str | None = None
    condition: str | None = None
    n_items: int
    n_generated: int
    gold: GoldScores | None = None
    grade: GoldMetric | None = None
    changed_share: float | None = None
    w: float | None = None  # the reward weight (RGD)
    examples: str | None = None  # where the in-context examples came from (ICL)
    example_kinds: dict[str, int] = {}  # items per kind of examples shown (ICL)
    seconds_per_item: float | None = None  # decoding time per item generated now (None: all resumed)
    resumed_from: int = 0  # items a finished earlier invocation had generated


class Curve(_Open):
    """A Best-of-N curve: the mean grade per k with its CI (None where no item counts)."""

    mean: list[float | None]
    ci_low: list[float | None]
    ci_high: list[float | None]


class BonLine(_Open):
    """One RM's line of bon.json's `rms`: its curves, or the error that left it without one."""

    rm: str
    n_items: int = Field(ge=0)
    error: str | None = None
    first_k: list[float | None] = []
    expected: list[float | None] = []
    ci_low: list[float | None] = []
    ci_high: list[float | None] = []
    top_k: int | None = None  # the posts the RM was shown


class GraderInfo(_Open):
    """A grader's run info: its spec and how much grading the cache saved."""

    grader: str | None = None
    calls: int = 0
    cache_hits: int = 0
    parse_failures: int = 0


class GraderCalls(_Open):
    made: int
    naive: int
    naive_rule: str


class BonRunSummary(_Open):
    """bon.json (`prbench bon`): every RM's Best-of-N curve beside the oracle and random ones."""

    samples: str
    condition: str
    n_items: int = Field(ge=0)
    k: list[int]
    grader: GraderInfo
    rms: list[BonLine]
    oracle: Curve
    random: Curve
    n_gradable_items: int = Field(ge=0)
    distinct_samples: int = Field(ge=0)
    grader_calls: GraderCalls
    cost: CostSummary | None = None


class BuildSummary(_Open):
    """A build's summary.json (`prbench build`): the pairs processed, kept and dropped, the calls, the push."""

    processed: int = Field(ge=0)
    kept: int = Field(ge=0)
    dropped: int = Field(ge=0)
    per_category: dict[str, int] = {}
    resumed_from: int = 0
    cost: CostSummary | None = None
    pushed_to: str | None = None


class RankValue(_Open):
    """One rank-agreement metric of a meta row (`metrics.rank_agreement_bootstrap`): value, CI, permutation p."""

    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None

    @classmethod
    def of(cls, metrics: dict[str, Any] | None, name: str) -> RankValue:
        """Metric `name` of a meta row's `metrics` (None: the row has none); empty when undefined."""
        found = (metrics or {}).get(name)  # the model reading its own input
        return cls.model_validate(found or {})


SUMMARY_MODELS: dict[str, type[_Open]] = {"eval": EvalSummary, "policy-accuracy": PolicyAccuracySummary,
                                          "rgd": GenerationSummary, "icl": GenerationSummary}


def newer_format(s: dict[str, Any], file: str | Path) -> str | None:
    """A note for a summary written by a newer prbench (its fields may mean something this version does not know)."""
    fmt = s.get("format")
    if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT:
        return (f"note: {file}: format {fmt} is newer than this prbench reads ({FORMAT}); read as format {FORMAT} "
                "(upgrade prbench to read every field)")
    return None


def typed_summary(s: Any, file: str | Path = "summary.json", model: type[BaseModel] | None = None) -> Any:
    """The summary as its kind's model (an unstamped folder upgraded); a field that is missing or wrong is named."""
    if not isinstance(s, dict):
        raise DataError(str(file), None, None, f"not a JSON object but {type(s).__name__}; rerun the command "
                                               "that wrote this run")
    kind = run_kind(s)
    model = model or SUMMARY_MODELS.get(kind or "")
    if model is None:
        raise DataError(str(file), None, "run", f"not a run summary prbench can read (kind {kind!r})")
    try:
        return model.model_validate({**s, "run": kind} if kind else s)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        got = f" (got {err['input']!r:.40})" if not isinstance(err.get("input"), (dict, list)) else ""
        raise DataError(str(file), None, field, f"{err['msg']}{got}; rerun the command that wrote this run"
                        ) from None


def _credit(v: float | None) -> float | None:
    if v is not None and v not in (0.0, 0.5, 1.0):
        raise ValueError("a pair's credit is 1 (chosen preferred), 0.5 (tie), 0 (rejected) or null (invalid)")
    return v


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
    longer: str | None = None  # which answer is longer: "chosen", "rejected" or "same"

    _check_credit = field_validator("credit")(_credit)

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
    longer: str | None = None

    _check_credit = field_validator("credit")(_credit)

    @property
    def truncated_any(self) -> bool:
        return self.truncated


EvalRecord = PointwiseRecord | PairwiseRecord  # one eval record, whichever kind of RM wrote it


def typed_record(rec: dict[str, Any], file: str | Path = "examples.jsonl", line: int | None = None
                 ) -> EvalRecord:
    """A per-example eval record as its model (pairwise when it holds verdicts)."""
    model = PairwiseRecord if "verdicts" in rec else PointwiseRecord
    try:
        return model.model_validate(rec)
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(str(file), line, ".".join(str(p) for p in err["loc"]), err["msg"].removeprefix("Value error, ")
                        ) from None
