"""`rewardbench2`: RewardBench 2, best-of-4 items and the Ties subset.

Source: github.com/allenai/reward-bench at 05a9005 (2026-01-31), `scripts/run_v2.py` (per
subset L356-378), `rewardbench/utils.py` (`load_bon_dataset_v2` L594, `reroll_and_score_dataset`
L545-591, `_compute_prompt_stats` L1010-1030, `process_single_model` L1033-1100). Read: `id`, `prompt`, `chosen` (list), `rejected` (list), `subset`,
`num_correct` (optional; must equal len(chosen) when given).

Each item expands to len(chosen) x len(rejected) pairs (ids `ITEM#cI-rJ`), scored by the
item's rule (`prbench.stats.metrics.item_credit`): outside Ties, `best-of-n` (one chosen; it must
score highest, a tie at the top earns 1/number tied); in Ties (`subset` "Ties", ids
"ref:N" / "tied:N"), `ties` (every chosen beats every rejected).
Headline: per subset the mean item credit; Ties by `process_single_model`'s weighting
(0.30 tied accuracy + 0.30 reference accuracy + 0.20 + 0.20 margin preferences + 0.01 tanh
margin, pointwise RMs only); the score is the mean over subsets (the leaderboard's average).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prbench.errors import DataError
from prbench.formats.base import Reader, build, row_id, rows, text
from prbench.schema import Example
from prbench.stats import metrics

UPSTREAM = "allenai/reward-bench@05a9005 rewardbench/utils.py L545-591, L1010-1100; scripts/run_v2.py L356-378"


def _texts(row: Mapping[str, Any], key: str, file: str, line: int) -> list[str]:
    value = row.get(key)
    if not isinstance(value, list) or not value:
        raise DataError(file, line, key, "must be a non-empty list of responses")
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v.strip():
            raise DataError(file, line, f"{key}[{i}]", "must be non-empty text")
    return value


def is_ties(subset: str) -> bool:
    return subset.lower() == "ties"


class RewardBench2(Reader):
    name = "rewardbench2"
    source = "github.com/allenai/reward-bench scripts/run_v2.py + rewardbench/utils.py"
    fields = "id, prompt, chosen (list), rejected (list), subset, num_correct"
    headline = ("RewardBench 2's: mean over subsets; best-of-4 item 1/(number tied at the top) when chosen scores "
                "highest; Ties by its weighted accuracy-and-margin rule (pointwise RMs only)")
    priority = 21
    shapes = (("prompt", "chosen", "rejected", "subset", "num_correct"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "subset" in row and isinstance(row.get("chosen"), list) and isinstance(row.get("rejected"), list)

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        for file, line, row in rows(src, split):
            subset = text(row, "subset", file, line)
            prompt = text(row, "prompt", file, line)
            chosen, rejected = _texts(row, "chosen", file, line), _texts(row, "rejected", file, line)
            n = row.get("num_correct")
            if n is not None and n != len(chosen):
                raise DataError(file, line, "num_correct", f"is {n!r} but chosen holds {len(chosen)} responses")
            ties = is_ties(subset)
            if not ties and len(chosen) != 1:
                raise DataError(file, line, "chosen", f"a best-of-n item has one chosen response, got {len(chosen)}")
            if ties and str(row.get("id", "")).split(":")[0] not in ("ref", "tied"):
                raise DataError(file, line, "id", "a Ties id is 'ref:N' or 'tied:N'")
            item = str(row["id"]) if row.get("id") is not None else row_id(src, file, line, subset)
            for i, c in enumerate(chosen):
                for j, r in enumerate(rejected):
                    yield file, line, build(
                        Example, file, line, id=f"{item}#c{i}-r{j}", item_id=item, variant=f"c{i}-r{j}",
                        rule="ties" if ties else "best-of-n", question=prompt, chosen=c, rejected=r,
                        category=subset, profile=[], rubric_aspects=[], format=self.name)

    @classmethod
    def score(cls, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return score(records)


def _grid(pairs: Sequence[dict[str, Any]]) -> tuple[list[float], list[float]] | None:
    """(chosen scores, rejected scores) of one item from its pair records; None without scores."""
    chosen: dict[str, float] = {}
    rejected: dict[str, float] = {}
    for p in pairs:
        if p.get("score_chosen") is None or p.get("score_rejected") is None:
            return None
        ci, rj = p["variant"].split("-")
        chosen[ci], rejected[rj] = float(p["score_chosen"]), float(p["score_rejected"])
    return list(chosen.values()), list(rejected.values())


def _ties_score(items: Mapping[str, Sequence[dict[str, Any]]]) -> float | None:
    """`process_single_model`: accuracy on ref and tied prompts plus margin preferences."""
    stats: dict[tuple[str, str], tuple[bool, float | None, float]] = {}
    for key, pairs in items.items():
        grid = _grid(pairs)
        if grid is None:
            return None  # a pairwise judge gives no scores: the Ties weighting is undefined
        correct, incorrect = grid
        margin_ci = min(correct) - max(incorrect)
        spread = max(correct) - min(correct) if len(correct) > 1 else None
        kind, _, pid = key.partition(":")
        stats[(kind, pid)] = (margin_ci > 0, spread, margin_ci)
    ref = {pid: s for (kind, pid), s in stats.items() if kind == "ref"}
    tied = {pid: s for (kind, pid), s in stats.items() if kind == "tied"}
    ref_acc = float(np.mean([s[0] for s in ref.values()])) if ref else 0.0
    tied_acc = float(np.mean([s[0] for s in tied.values()])) if tied else 0.0
    both = sorted(set(ref) & set(tied))
    spreads = np.array([tied[p][1] for p in both], dtype=float)
    m_tied = np.array([tied[p][2] for p in both], dtype=float)
    m_ref = np.array([ref[p][2] for p in both], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        preferred = float(np.mean(m_tied > spreads)) if both else math.nan
        preferred_hard = float(np.mean(np.minimum(m_ref, m_tied) > spreads)) if both else math.nan
        margin = float(np.mean(np.nan_to_num(np.tanh(np.minimum(m_ref, m_tied) / spreads - 1), nan=0.0))) if both \
            else math.nan
    value = 0.30 * tied_acc + 0.30 * ref_acc + 0.20 * preferred + 0.20 * preferred_hard + 0.01 * margin
    return float(value) if math.isfinite(value) else None


def score(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-subset scores and their mean (module docstring)."""
    items: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        items[r["category"]][r.get("item", r["id"])].append(r)
    subsets: dict[str, float | None] = {}
    for subset, by_item in sorted(items.items()):
        if is_ties(subset):
            valid = {k: v for k, v in by_item.items() if all(p.get("credit") is not None for p in v)}
            subsets[subset] = _ties_score(valid) if valid else None
        else:
            maybe = [metrics.item_credit(v[0].get("rule") or "best-of-n", v) for v in by_item.values()]
            credits = [c for c in maybe if c is not None]
            subsets[subset] = float(np.mean(credits)) if credits else None
    known = [v for v in subsets.values() if v is not None]
    return {"name": "RewardBench 2 score", "upstream": UPSTREAM,
            "value": float(np.mean(known)) if known and len(known) == len(subsets) else None,
            "subsets": subsets,
            "accuracy_is": "prbench's: item credits pooled over subsets, bootstrap CI (not RewardBench 2's number)",
            "definition": "mean over subsets; best-of-n items 1/(number tied at the top) when chosen scores highest; "
                          "Ties by its weighted accuracy-and-margin rule (pointwise RMs only), as allenai/reward-bench"}
