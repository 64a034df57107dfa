"""Keep a pair only when it separates on personal fit and on nothing else.

The rule (every threshold configurable, defaults in brackets):

1. both answers were generated (else "generation failed");
2. both answers were scored by the validator (else "validation parse failure", or
   "validator error" when the engine itself failed);
3. chosen rubric_fit >= min_chosen_fit [4]            ("chosen rubric fit too low");
4. rejected rubric_fit <= max_rejected_fit [2]        ("rejected rubric fit too high");
5. |chosen - rejected| <= max_quality_gap [1] on factuality, relevance and helpfulness
   ("<scale> gap too large"): general quality must be close, as in the paper's table;
6. max(words) / min(words) <= max_length_ratio [1.5]  ("length ratio too large"), so that
   a length-only reward model cannot solve the pair.

Every failing check is recorded; the first one in this order is the item's drop reason, so the
per-reason counts add up to the number dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from prbench.build.validate import GENERAL_SCALES

GENERATION_FAILED = "generation failed"
PARSE_FAILURE = "validation parse failure"
VALIDATOR_ERROR = "validator error"
CHOSEN_FIT = "chosen rubric fit too low"
REJECTED_FIT = "rejected rubric fit too high"
LENGTH_RATIO = "length ratio too large"
REASONS = (GENERATION_FAILED, PARSE_FAILURE, VALIDATOR_ERROR, CHOSEN_FIT, REJECTED_FIT,
           *(f"{s} gap too large" for s in GENERAL_SCALES), LENGTH_RATIO)


@dataclass(frozen=True)
class FilterRule:
    """Thresholds of the keep rule (see the module docstring)."""

    min_chosen_fit: float = 4
    max_rejected_fit: float = 2
    max_quality_gap: float = 1
    max_length_ratio: float = 1.5

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def describe(self) -> str:
        """The rule in one line, for the dataset card and the report."""
        return (f"keep a pair iff chosen rubric_fit >= {self.min_chosen_fit:g}, rejected rubric_fit <= "
                f"{self.max_rejected_fit:g}, |chosen - rejected| <= {self.max_quality_gap:g} on each of "
                f"{', '.join(GENERAL_SCALES)}, and max/min word count <= {self.max_length_ratio:g}")


def length_ratio(a_words: int, b_words: int) -> float:
    """max/min word count; infinite when one side is empty."""
    lo, hi = sorted((a_words, b_words))
    return float("inf") if lo == 0 else hi / lo


def failed_checks(
    rule: FilterRule,
    chosen: Mapping[str, float],
    rejected: Mapping[str, float],
    chosen_words: int,
    rejected_words: int,
) -> list[str]:
    """Every check a validated pair fails, in rule order (empty list = keep)."""
    reasons = []
    if chosen["rubric_fit"] < rule.min_chosen_fit:
        reasons.append(CHOSEN_FIT)
    if rejected["rubric_fit"] > rule.max_rejected_fit:
        reasons.append(REJECTED_FIT)
    for s in GENERAL_SCALES:
        if abs(chosen[s] - rejected[s]) > rule.max_quality_gap:
            reasons.append(f"{s} gap too large")
    if length_ratio(chosen_words, rejected_words) > rule.max_length_ratio:
        reasons.append(LENGTH_RATIO)
    return reasons


def decide(record: Mapping, rule: FilterRule) -> list[str]:
    """All drop reasons of one build record (empty = keep), first reason first.

    Decisions are recomputed from the stored answers and scores whenever a build finishes, so
    changing a threshold re-filters without a single new model call.
    """
    if record["chosen"].get("error") or record["rejected"].get("error"):
        return [GENERATION_FAILED]
    val = record.get("validation") or {}
    missing = [val.get(role) or {} for role in ("chosen", "rejected")]
    if any(not v.get("scores") for v in missing):
        unscored = [v for v in missing if not v.get("scores")]
        engine_failed = any((v.get("error") or "").startswith("validator error") for v in unscored)
        return [VALIDATOR_ERROR if engine_failed else PARSE_FAILURE]
    return failed_checks(rule, val["chosen"]["scores"], val["rejected"]["scores"],
                         record["chosen"]["words"], record["rejected"]["words"])
