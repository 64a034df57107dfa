"""The meta-evaluation result as typed records: what `meta_evaluate` returns and what meta.json holds.

One model for both sides: `meta_evaluate` builds it, `write_meta` dumps it, and every reader of a
meta.json (the report, `prbench report --meta`, the study's report stage) validates the file
through `MetaResult.read`, so a misspelt field is an error, never a silent None.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prbench.errors import PrbenchError
from prbench.store.records import OptionalFields, RankValue


class _Part(OptionalFields, BaseModel):  # BaseModel named too: linters see a pydantic model
    """A part of the result; `optional` fields are left out of the JSON when unset (None), as meta always wrote."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)


class BenchmarkRef(_Part):
    """The benchmark side of a row: data x condition, and the summary compared."""

    data: str
    condition: str
    label: str
    summary_stat: str = Field(alias="summary")  # the benchmark summary (mean, worst_category, mean_margin)


class SettingRef(_Part):
    """The downstream side of a row (a `Setting` by its label)."""

    label: str
    setting: str
    k: int | None = None
    max_k: bool = False
    condition: str | None = None


class SummaryAgreement(_Part):
    """One benchmark summary's point agreement with the setting (the summary comparison)."""

    spearman: float | None
    kendall_tau_b: float | None
    scores: dict[str, float | None]


class MetaRow(_Part):
    """One benchmark x setting row: aligned RMs, items, resampling, every rank metric, summary comparison.

    A row with a note (too few RMs, no shared item) has no `metrics` and none of the item fields.
    """

    optional: ClassVar[tuple[str, ...]] = ("resampling", "n_items_benchmark", "n_items_downstream", "n_items_shared",
                                           "benchmark_scores", "downstream_scores")
    benchmark: BenchmarkRef
    setting: SettingRef
    n_rms: int
    rms: list[str]
    unmatched_downstream_rms: list[str] = []
    metrics: dict[str, RankValue] | None = None
    by_summary: dict[str, SummaryAgreement | None] = {}
    best_summary: str | None = None
    note: str | None = None
    resampling: str | None = None
    n_items_benchmark: int | None = None
    n_items_downstream: int | None = None
    n_items_shared: int | None = None
    benchmark_scores: dict[str, float | None] | None = None
    downstream_scores: dict[str, float | None] | None = None

    def metric(self, name: str) -> RankValue:
        """Metric `name` (empty when the row has none)."""
        return self.metrics[name] if self.metrics and name in self.metrics else RankValue()


class PaperB(_Part):
    """Kendall tau-b between RM accuracy and policy accuracy, from the benchmark or inside the run."""

    optional: ClassVar[tuple[str, ...]] = ("spearman", "n_items")
    source: str
    benchmark: str
    setting: str
    n_rms: int
    kendall_tau_b: RankValue | None = None
    note: str | None = None
    spearman: RankValue | None = None
    n_items: int | None = None


class SummaryStanding(_Part):
    """One benchmark summary over the common rows."""

    mean_spearman: float | None
    mean_kendall_tau_b: float | None
    n_rows: int
    n_rows_available: int
    best_in_rows: int


class SummaryComparison(_Part):
    """Which benchmark summary tracks downstream best (`meta.stats.summary_comparison`)."""

    overall: dict[str, SummaryStanding] = {}
    best: str | None = None
    compared: list[str] = []
    n_common_rows: int = 0
    rule: str = ""


class CrossEntry(_Part):
    """One benchmark's agreement with one downstream setting in the cross-benchmark table."""

    benchmark: str
    data: str
    condition: str
    n_rms: int
    rms: list[str]
    metrics: dict[str, RankValue] | None = None
    note: str | None = None

    def metric(self, name: str) -> RankValue:
        return self.metrics[name] if self.metrics and name in self.metrics else RankValue()


class CrossBenchmark(_Part):
    """Per downstream setting: every benchmark compared with it, the best per metric and overall."""

    setting: str
    benchmarks: list[CrossEntry]
    best: dict[str, str | None]
    best_overall: str | None = None
    wins: dict[str, int] = {}
    same_rms: bool = True


class JudgeWithLabels(_Part):
    judge: str
    kappa: float | None
    n: int


class JudgePair(_Part):
    a: str
    b: str
    n: int
    agree: float | None
    kappa: float | None


class JudgeAgreement(_Part):
    """Agreement of the pairwise judges of one benchmark (`meta.stats.judge_agreement`)."""

    judges: list[str]
    with_labels: list[JudgeWithLabels]
    pairs: list[JudgePair]
    krippendorff_alpha: float | None
    n_items: int


class BenchmarkInfo(_Part):
    """One benchmark (data x condition): its RMs and their runs."""

    label: str
    data: str
    condition: str
    rms: list[str]
    runs: dict[str, str]
    judge_agreement: JudgeAgreement | None = None


class SettingInfo(_Part):
    """One downstream setting as meta saw it (`Setting.describe`)."""

    label: str
    setting: str
    k: int | None = None
    max_k: bool = False
    condition: str | None = None
    params: dict[str, Any] = {}
    rms: list[str] = []
    n_items: dict[str, int] = {}
    sources: dict[str, str] = {}


class MetaDefaults(_Part):
    """The library defaults of `meta_evaluate` (stated beside the values used)."""

    summary_stat: str = Field(default="mean", alias="summary")
    seed: int = 0
    n_boot: int = 1000
    n_perm: int = 1000
    p: float = 0.9
    k: int | None = None
    ci: float = 0.95
    pairing: str = "auto"
    joint_min_share: float = 0.9
    bon_curve: str = "expected"
    bon_k: str = "all"
    pa_metric: str = "total"
    min_rms: int = 3
    match_condition: bool = False


class MetaParameters(_Part):
    """The values this result was computed with (in the order the report lists them)."""

    summary_stat: str = Field(alias="summary")  # the benchmark summary compared (JSON: "summary")
    seed: int
    n_boot: int
    n_perm: int
    p: float
    k: int | None
    ci: float
    pairing: str
    joint_min_share: float
    min_rms: int
    conditions: list[str] | None = None
    match_condition: bool = False
    bon_curve: str = "expected"
    bon_k: str = "all"
    pa_metric: str = "total"
    metrics: list[str] = []
    benchmark_runs: list[str] = []
    downstream: list[str] = []


class MetaResult(_Part):
    """Everything `meta_evaluate` computes; meta.json is its JSON."""

    format: int
    prbench: str
    parameters: MetaParameters
    defaults: MetaDefaults = MetaDefaults()
    definitions: dict[str, str] = {}
    benchmarks: list[BenchmarkInfo] = []
    settings: list[SettingInfo] = []
    rows: list[MetaRow] = []
    paper_b: list[PaperB] = []
    summary_comparison: SummaryComparison = SummaryComparison()
    cross_benchmark: list[CrossBenchmark] = []
    notes: list[str] = []

    def main_rows(self) -> list[MetaRow]:
        """Rows of the headline table: BoN only at its largest k, every other setting as is."""
        return [r for r in self.rows if r.setting.setting != "bon" or r.setting.max_k]

    @classmethod
    def read(cls, path: str | Path) -> MetaResult:
        """A meta.json as written by `prbench meta` (or the study); anything else is one line naming the file."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PrbenchError(f"{path}: cannot read meta-evaluation ({exc})") from None
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise PrbenchError(f"{path}: not a meta.json written by `prbench meta` ({where}: {err['msg']})") from None
