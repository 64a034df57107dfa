"""Policy accuracy: the guided likelihood's definition, w = 0 equals the plain policy, batching, caching."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import transformers  # noqa: F401
from scipy.special import logsumexp

from prbench.context.conditions import View
from prbench.rewards.base import PointwiseRM, Score
from prbench.schema import Example, ProfilePost, RubricAspect
from prbench.store.cache import Cache
from prbench.store.records import PolicyAccuracySummary


class RecordingRM(PointwiseRM):
    def __init__(self, fn: Callable[[View, str], float], spec: str = "test:recording"):
        self.fn, self.spec = fn, spec
        self.calls = 0
        self.n_texts = 0

    def fingerprint(self) -> dict:
        return {"spec": self.spec}

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        self.calls += 1
        self.n_texts += len(batch)
        return [Score(float(self.fn(v, t))) for v, t in batch]


def hashed(view: View, text: str) -> float:
    return (zlib.crc32(f"{view.example_id}:{text}".encode()) % 1000) / 1000


PAIRS = [("Use cheap Rodinal.", "Buy a lab service."), ("Shoot HP5 at 1600.", "Try colour film."),
         ("Warm water bath.", "Get a heater."), ("Stand develop it.", "Send it out.")]


def make_examples() -> list[Example]:
    return [Example(id=f"ex-{i}", category="Art_and_Entertainment", question=f"Developing question {i}?",
                    profile=[ProfilePost(id=f"p{i}", text="I develop film in my bathroom.")],
                    rubric_aspects=[RubricAspect(aspect="Cheap", reason="budget")], chosen=c, rejected=r)
            for i, (c, r) in enumerate(PAIRS)]


@pytest.fixture()
def engine(tiny_engine):
    """The session's tiny random policy (conftest)."""
    return tiny_engine


KW = {"condition": "oracle", "k": 5, "top_k": 1, "n_boot": 50}


# -- the formula ----------------------------------------------------------------------------------
def test_guided_logprob_by_hand():
    from prbench.capabilities.policy_accuracy.driver import guided_logprob

    lp = np.log(np.array([0.5, 0.2, 0.1]))  # full-vocabulary probabilities of the 3 candidates
    r = np.array([0.0, 1.0, 0.0])
    # topk: softmax over the candidates of log p + w r
    g = lp + 2.0 * r
    assert guided_logprob(lp, r, 1, 2.0, "topk") == pytest.approx(g[1] - logsumexp(g))
    # full: the candidates keep their total mass 0.8, split by the guided scores
    p = np.exp(g) / np.exp(g).sum() * 0.8
    for t in range(3):
        assert guided_logprob(lp, r, t, 2.0, "full") == pytest.approx(math.log(p[t]))
    # w = 0: full is the policy itself, exactly; topk renormalises over the candidates
    assert guided_logprob(lp, r, 2, 0.0, "full") == lp[2]
    assert guided_logprob(lp, r, 2, 0.0, "topk") == pytest.approx(math.log(0.1 / 0.8))


@pytest.mark.parametrize("mode,total", [("topk", 1.0), ("full", 0.8)])
def test_guided_distribution_is_normalised(mode, total):
    from prbench.capabilities.policy_accuracy.driver import guided_logprob

    lp = np.log(np.array([0.5, 0.2, 0.1]))
    r = np.array([0.3, -1.0, 2.0])
    mass = sum(math.exp(guided_logprob(lp, r, t, 1.5, mode)) for t in range(3))
    assert mass == pytest.approx(total)


# -- over data --------------------------------------------------------------------------------------
def test_w0_full_equals_plain_policy_exactly(engine):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    rm = RecordingRM(hashed)
    res = policy_accuracy(engine, rm, make_examples(), w=0.0, mode="full", **KW)
    assert rm.calls == 0
    for rec in res.records:
        assert rec["guided"] == rec["plain"]
        assert rec["credit_total"] == rec["plain_credit_total"]
        assert rec["credit_norm"] == rec["plain_credit_norm"]
    s = res.summary
    assert s.policy_accuracy == s.plain_policy_accuracy
    assert s.policy_accuracy_normalized == s.plain_policy_accuracy_normalized
    agree = s.metrics.agreement_with_plain
    assert (agree.total, agree.normalized) == (1.0, 1.0)


def test_plain_policy_matches_engine_loglik(engine):
    from prbench.capabilities.policy_accuracy.driver import (
        PAParams,
        ScoreRequest,
        score_responses,
        tokenize_response,
    )
    from prbench.context.conditions import build_view
    from prbench.context.retrieval import load_retriever
    from prbench.downstream.sampling import policy_messages
    from prbench.prompts import load_prompt

    ex = make_examples()[0]
    msgs = policy_messages(build_view(ex, "profile", retriever=load_retriever("bm25"), top_k=1),
                           load_prompt("policy_answer"), 100)
    p, c, _ = tokenize_response(engine, msgs, ex.chosen)
    got = score_responses(engine, [ScoreRequest(p, c)], PAParams(w=0.0, k=5))[0]
    ref = engine.loglik([(msgs, ex.chosen)])[0]
    assert np.allclose(got.plain, ref, atol=1e-4)
    assert got.guided == got.plain


def test_topk_mode_at_w0_renormalises(engine):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    res = policy_accuracy(engine, None, make_examples(), w=0.0, mode="topk", **KW)
    for rec in res.records:
        for side in ("chosen", "rejected"):
            assert rec["guided"][side] >= rec["plain"][side]  # log p - log P(C) >= log p
    assert any(rec["guided"] != rec["plain"] for rec in res.records)


def test_batch_sizes_do_not_change_results(engine):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    a = policy_accuracy(engine, RecordingRM(hashed), make_examples(), w=2.0, batch_size=1, rm_batch_size=3, **KW)
    b = policy_accuracy(engine, RecordingRM(hashed), make_examples(), w=2.0, batch_size=4, rm_batch_size=500, **KW)
    for ra, rb in zip(a.records, b.records):
        for key in ("credit_total", "credit_norm", "plain_credit_total", "rm_credit"):
            assert ra[key] == rb[key]
        for side in ("chosen", "rejected", "chosen_mean", "rejected_mean"):
            assert ra["guided"][side] == pytest.approx(rb["guided"][side], rel=1e-5)


def test_all_positions_are_batched_and_cached(engine, tmp_path):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    cache = Cache(tmp_path / "c.sqlite", namespace="scores")
    rm = RecordingRM(hashed)
    first = policy_accuracy(engine, rm, make_examples(), w=1.0, batch_size=4, rm_batch_size=100_000, cache=cache, **KW)
    assert rm.calls == 1  # every candidate prefix of every position of all 8 responses in one RM call
    assert rm.n_texts == first.written["rewards"]["rm_texts"] > 8 * 5
    rm2 = RecordingRM(hashed)
    second = policy_accuracy(engine, rm2, make_examples(), w=1.0, batch_size=2, cache=cache, **KW)
    assert rm2.calls == 0 and second.written["rewards"]["cache_hits"] > 0
    assert [r["credit_total"] for r in first.records] == [r["credit_total"] for r in second.records]


def test_a_reward_that_knows_chosen_raises_policy_accuracy(engine):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    chosen = {f"ex-{i}": c for i, (c, _) in enumerate(PAIRS)}

    def knows(view: View, text: str) -> float:
        return 1.0 if chosen[view.example_id].startswith(text) else 0.0

    res = policy_accuracy(engine, RecordingRM(knows), make_examples(), w=20.0, **KW)
    assert res.summary.policy_accuracy == 1.0
    assert res.written["metrics"]["mean_margin_shift"] > 0
    assert res.summary.metrics.rm_accuracy.accuracy == 1.0


def test_run_folder_resumes(engine, tmp_path):
    from prbench.capabilities.policy_accuracy.driver import policy_accuracy

    rm = RecordingRM(hashed)
    a = policy_accuracy(engine, rm, make_examples(), tmp_path / "o", w=1.0, **KW)
    assert a.path is not None and (a.path / "examples.jsonl").is_file() and (a.path / "summary.json").is_file()
    calls = rm.calls
    b = policy_accuracy(engine, rm, make_examples(), tmp_path / "o", w=1.0, **KW)
    assert rm.calls == calls and b.summary.resumed_from == 4 and b.records == a.records
    assert isinstance(b.summary, PolicyAccuracySummary)
    assert b.written == json.loads((b.path / "summary.json").read_text())  # the file as the last run wrote it
    assert a.written["definition"] and a.summary.mode == "full"
