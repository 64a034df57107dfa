"""Gold-answer scoring: ROUGE against hand-computed values, missing gold counted, embeddings, CIs."""

from __future__ import annotations

import pytest
import rouge_score  # noqa: F401  (make test installs it: missing must fail)

from prbench.schema import SourceItem


def item(i: str, gold: str | None) -> SourceItem:
    return SourceItem(id=i, question="q?", profile=[], rubric_aspects=[], category="Art_and_Entertainment",
                      gold_answer=gold)


def test_rouge_by_hand():
    from prbench.downstream.gold import rouge_f1

    # gold 6 tokens, prediction 3, all 3 shared and in order: P = 1, R = 1/2, F1 = 2/3 (unigram and LCS)
    r = rouge_f1(["the cat sat on the mat"], ["the cat sat"])[0]
    assert r["rouge1"] == pytest.approx(2 / 3) and r["rougeL"] == pytest.approx(2 / 3)
    # stemming: running->run, dogs->dog, runs->run. gold [run, dog], pred [the, dog, run]
    # unigram overlap 2: P = 2/3, R = 1 -> F1 = 0.8; LCS 1: P = 1/3, R = 1/2 -> F1 = 0.4
    r = rouge_f1(["running dogs"], ["the dog runs"])[0]
    assert r["rouge1"] == pytest.approx(0.8) and r["rougeL"] == pytest.approx(0.4)
    # nothing shared, and an empty prediction, both 0
    assert rouge_f1(["alpha beta"], ["gamma"])[0] == {"rouge1": 0.0, "rougeL": 0.0}
    assert rouge_f1(["alpha beta"], ["   "])[0] == {"rouge1": 0.0, "rougeL": 0.0}


def test_missing_gold_is_counted_not_scored_zero():
    from prbench.downstream.gold import score_gold

    items = [item("a", "the cat sat on the mat"), item("b", None), item("c", "  "), item("d", "running dogs"),
             item("e", "never generated")]
    res = score_gold(items, {"a": "the cat sat", "b": "x", "c": "y", "d": "the dog runs"}, encoder=None,
                     seed=0, n_boot=200)
    assert set(res.per_item) == {"a", "d"}
    assert res.n_missing_gold == 2 and sorted(res.missing_gold_ids) == ["b", "c"]
    assert res.n_missing_generation == 1
    assert res.mean("rouge1") == pytest.approx((2 / 3 + 0.8) / 2)
    assert res.means["rougeL"]["n"] == 2 and "embedding" not in res.means
    s = res.summary()
    assert s["n_scored"] == 2 and s["n_missing_gold"] == 2 and s["encoder"] is None
    lo, hi = s["metrics"]["rouge1"]["ci_low"], s["metrics"]["rouge1"]["ci_high"]
    assert lo <= res.mean("rouge1") <= hi
    again = score_gold(items, {"a": "the cat sat", "d": "the dog runs"}, encoder=None, seed=0, n_boot=200)
    assert again.means["rouge1"] == res.means["rouge1"]  # seeded CI


def test_no_gold_at_all():
    from prbench.downstream.gold import score_gold

    res = score_gold([item("a", None)], {"a": "text"}, encoder=None)
    assert res.per_item == {} and res.n_missing_gold == 1 and res.mean("rouge1") is None


def test_embedding_similarity_with_builtin_minilm():
    from prbench.downstream.gold import score_gold

    items = [item("a", "Develop HP5 in Rodinal for an hour at 20 degrees."), item("b", "I love jazz records.")]
    res = score_gold(items, {"a": "Develop HP5 in Rodinal for an hour at 20 degrees.", "b": ""},
                     seed=0, n_boot=50)
    assert res.per_item["a"]["embedding"] == pytest.approx(1.0, abs=1e-4)
    assert res.per_item["b"]["embedding"] == 0.0  # empty generation
    assert res.encoder == "builtin:minilm-l6"


def test_compare_gold_is_paired():
    from prbench.downstream.gold import compare_gold, score_gold

    items = [item("a", "the cat sat on the mat"), item("d", "running dogs")]
    a = score_gold(items, {"a": "the cat sat on the mat", "d": "the dog runs"}, encoder=None, n_boot=50)
    b = score_gold(items, {"a": "the cat sat", "d": "the dog runs"}, encoder=None, n_boot=50)
    c = compare_gold(a, b, "rouge1", n_boot=50)
    assert c["n"] == 2 and c["diff"] == pytest.approx((1 - 2 / 3) / 2)
    assert c["a_better"] == 1 and c["equal"] == 1
