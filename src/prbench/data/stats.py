"""Descriptive statistics of a benchmark: the numbers a dataset card needs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from prbench.context.judgments import stance_of
from prbench.schema import Example, SourceItem


def words(text: str) -> int:
    return len(text.split())


def _describe(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {"min": float(a.min()), "mean": round(float(a.mean()), 2), "median": float(np.median(a)),
            "max": float(a.max())}


def dataset_stats(items: Sequence[SourceItem]) -> dict[str, Any]:
    """Items per category, users, profile and rubric sizes, response lengths and length balance."""
    out: dict[str, Any] = {
        "items": len(items),
        "per_category": dict(sorted(Counter(it.category for it in items).items())),
        "users": len({it.user_id for it in items if it.user_id}),
        "profile_posts": _describe([len(it.profile) for it in items]),
        "rubric_aspects": _describe([len(it.rubric_aspects) for it in items]),
        "question_words": _describe([words(it.question) for it in items]),
    }
    stances = Counter(stance_of(p)[0] for it in items for p in it.profile)
    if set(stances) - {"post"}:  # a profile of judgments: how many of each verdict (a sign-blind method would miss them)
        out["profile_stances"] = dict(sorted(stances.items()))
    if any(it.context for it in items):
        out["context_turns"] = _describe([len(it.context) for it in items])
    if any(it.history for it in items):
        out["history_pairs"] = _describe([len(it.history) for it in items])
    if any(it.persona for it in items):
        out["share_with_persona"] = round(float(np.mean([bool(it.persona) for it in items])), 4)
    pairs = [it for it in items if isinstance(it, Example)]
    if any(it.item_id for it in pairs):  # multi-response items: pairs are expanded, items counted once
        out["multi_response_items"] = len({it.item_id or it.id for it in pairs})
        out["rules"] = dict(sorted(Counter(it.rule or "pair" for it in pairs).items()))
    if pairs:
        c = [words(it.chosen) for it in pairs]
        r = [words(it.rejected) for it in pairs]
        out["chosen_words"] = _describe(c)
        out["rejected_words"] = _describe(r)
        out["share_chosen_longer"] = round(float(np.mean([a > b for a, b in zip(c, r)])), 4)
        out["share_equal_length"] = round(float(np.mean([a == b for a, b in zip(c, r)])), 4)
    return out
