"""Shared-prefix scoring (engines/prefix.py): batching rules, and equality with full scoring on tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prbench.engines.prefix import (
    MIN_EFFICIENCY,
    MIN_SHARED_PREFIX,
    common_prefix_length,
    efficient_batches,
    group_by_prefix,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=60), st.integers(1, 12))
def test_efficient_batches_cover_once_within_budget_and_efficiency(lengths: list[int], max_rows: int) -> None:
    budget = 6000
    batches = efficient_batches(lengths, budget, max_rows)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        width = max(lengths[i] for i in b)
        assert len(b) <= max_rows
        assert len(b) == 1 or len(b) * width <= budget
        assert sum(lengths[i] for i in b) >= MIN_EFFICIENCY * len(b) * width - 1e-9
    assert batches == efficient_batches(lengths, budget, max_rows)  # deterministic


def test_efficient_batches_group_similar_lengths() -> None:
    assert efficient_batches([100, 10, 101, 11, 99], 10_000) == [[1, 3], [4, 0, 2]]


def test_common_prefix_leaves_own_tokens() -> None:
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5]]) == 3
    assert common_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # the shorter keeps one own token
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 4]], keep=2) == 2
    assert common_prefix_length([[7, 1], [8, 1]]) == 0


def test_group_by_prefix_respects_keys_limits_and_minimum() -> None:
    base = list(range(100, 100 + 2 * MIN_SHARED_PREFIX))
    seqs = [base + [1, 2], base + [1, 3], base + [9], [5] * 30, base[:3] + [4]]
    keys = ["p", "p", "p", "q", "r"]
    groups = group_by_prefix(seqs, keys)
    assert groups.prefixes == [base] and groups.rest == [3, 4]
    assert [(i, s) for i, _, s in groups.suffixes] == [(0, [1, 2]), (1, [1, 3]), (2, [9])]
    limited = group_by_prefix(seqs, keys, limits=[len(base) - 1] * 5)
    assert limited.prefixes == [base[:-1]]
    too_short = group_by_prefix(seqs, keys, limits=[MIN_SHARED_PREFIX - 1] * 5)
    assert too_short.prefixes == [] and sorted(too_short.rest) == [0, 1, 2, 3, 4]


CONTINUATIONS = ["Sure, here is a plan.", " A long answer about cameras and film, pushing HP5 two stops.", "B",
                 "Mild curry with rice and lentils, then a shopping list for the week.", ""]
PROMPTS = [
    [{"role": "user", "content": "Profile: I shoot film, mostly HP5, and develop at home. " * 4 + "What next?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan a week of dinners. " * 3}],
]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_shared_loglik_equals_full_and_saves_prefix(tmp_path: Path, arch: str) -> None:
    from prbench.engines.transformers_engine import TransformersEngine
    from prbench.testing.tiny import make_tiny_causal_lm

    path = make_tiny_causal_lm(tmp_path / arch, seed=1, arch=arch)
    shared = TransformersEngine(str(path), device="cpu", batch_size=3)
    full = TransformersEngine(str(path), device="cpu", batch_size=3, share_prefix=False)
    assert shared.share_prefix and not full.share_prefix
    requests = [(p, c) for p in PROMPTS for c in CONTINUATIONS] + [(PROMPTS[0], "alone")]
    a, b = shared.loglik(requests), full.loglik(requests)
    for x, y, (_, c) in zip(a, b, requests):
        assert len(x) == len(y) and (len(x) > 0) == bool(c)
        assert x == pytest.approx(y, abs=1e-4)
    assert shared.stats["prefix_tokens_saved"] > 0
    assert shared.stats["tokens"] >= MIN_EFFICIENCY * shared.stats["padded_tokens"]
    one_by_one = [shared.loglik([r])[0] for r in requests]  # batch composition never matters
    for x, y in zip(a, one_by_one):
        assert x == pytest.approx(y, abs=1e-4)


def test_shared_classifier_scores_equal_full_with_efficient_padding(tiny_rm: Path) -> None:
    from prbench.context.conditions import build_views
    from prbench.context.retrieval import load_retriever
    from prbench.data import load_examples
    from prbench.rewards import load_rm

    items = load_examples("sample", limit=12)
    views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=1)
    batch: list[tuple[Any, str]] = [(v, r) for ex, v in zip(items, views) for r in (ex.chosen, ex.rejected)]
    shared = load_rm(f"hf:{tiny_rm}", batch_size=4)
    full = load_rm(f"hf:{tiny_rm}", batch_size=4, share_prefix=False)
    assert [s.value for s in shared.score(batch)] == pytest.approx([s.value for s in full.score(batch)], abs=1e-4)
    for rm in (shared, full):
        assert rm.counts["tokens"] >= MIN_EFFICIENCY * rm.counts["padded_tokens"]
        assert rm.counts["scored"] == len(batch)
    # the profile prefix ran once per pair: exactly the saved tokens are missing
    assert shared.counts["prefix_tokens_saved"] > 0.1 * full.counts["tokens"]
    assert shared.counts["tokens"] + shared.counts["prefix_tokens_saved"] == full.counts["tokens"]
