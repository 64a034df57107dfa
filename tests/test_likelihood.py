"""PMI reward and the likelihood judge on a tiny random causal LM (CPU, offline)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import transformers  # noqa: F401  (make test installs every extra: a missing one must fail, not skip)

from prbench import evaluate
from prbench.context.conditions import View
from prbench.rewards import PairQuery, load_rm
from prbench.rewards.judges import LikelihoodJudge, load_judge
from prbench.rewards.likelihood import LikelihoodReward, PMIReward
from prbench.schema import ProfilePost, RubricAspect
from prbench.testing.records import make_records

POSTS = tuple(ProfilePost(id=f"p{i}", category="hiking", text=f"I love long hikes, trip {i}.") for i in range(3))


def _views() -> list[View]:
    return [
        View("a", "How should I spend Saturday?", "profile", posts=POSTS),
        View("b", "Any weekend tips?", "oracle", aspects=(RubricAspect(aspect="Outdoors", reason="Loves hiking"),)),
        View("c", "What should I cook?", "none"),
    ]


RESPONSES = ["Go for a hike in the hills.", "Visit a shopping mall.", "Bake some bread at home, slowly."]


@pytest.fixture(scope="module")
def pmi(tiny_engine: Any) -> PMIReward:
    return PMIReward(tiny_engine)


def test_pmi_finite_and_zero_without_context(pmi: PMIReward) -> None:
    batch = [(v, r) for v in _views() for r in RESPONSES]
    scores = pmi.score(batch)
    assert all(s.valid and math.isfinite(s.value) for s in scores)
    for (view, _), s in zip(batch, scores):
        if view.condition == "none":
            assert s.value == 0.0  # same request twice: exactly zero, a tie
        else:
            assert s.value != 0.0


def test_pmi_matches_manual_loglik(tiny_engine: Any) -> None:
    view, resp = _views()[0], RESPONSES[0]
    with_ctx, without = tiny_engine.loglik([([{"role": "user", "content": view.prompt()}], resp),
                                            ([{"role": "user", "content": view.question}], resp)])
    mean = PMIReward(tiny_engine).score([(view, resp)])[0].value
    total = PMIReward(tiny_engine, normalize="sum").score([(view, resp)])[0].value
    assert mean == pytest.approx(sum(with_ctx) / len(with_ctx) - sum(without) / len(without), abs=1e-6)
    assert total == pytest.approx(sum(with_ctx) - sum(without), abs=1e-5)


def test_pmi_batch_invariance(pmi: PMIReward) -> None:
    batch = [(v, r) for v in _views() for r in RESPONSES]
    together = [s.value for s in pmi.score(batch)]
    alone = [pmi.score([item])[0].value for item in batch]
    reversed_ = [s.value for s in pmi.score(batch[::-1])][::-1]
    assert together == pytest.approx(alone, abs=1e-5)
    assert together == pytest.approx(reversed_, abs=1e-5)


def test_pmi_one_engine_call_per_batch(tiny_engine: Any) -> None:
    calls: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(tiny_engine, name)

        def loglik(self, requests: Any) -> Any:
            calls.append(len(requests))
            return tiny_engine.loglik(requests)

    from prbench.engines.base import Engine

    Engine.register(Counting)  # virtual subclass: open_engine takes it as a ready engine
    rm = PMIReward(Counting())  # type: ignore[arg-type]
    views = _views()
    rm.score([(views[0], RESPONSES[0]), (views[0], RESPONSES[1]), (views[2], RESPONSES[0])])
    # one call: 2 with-context + 2 question-only for view a; view c (`none`) sends its one request once
    assert calls == [5]


def test_pmi_empty_response_is_invalid(pmi: PMIReward) -> None:
    [s] = pmi.score([(_views()[0], "   ")])
    assert not s.valid and s.error == "empty response"


def test_pmi_via_load_rm_and_evaluate(tiny_lm: Path, tmp_path: Path) -> None:
    rm = load_rm(f"pmi:hf:{tiny_lm}", device="cpu", batch_size=4, seed=0)
    assert isinstance(rm, PMIReward) and rm.spec == f"pmi:hf:{tiny_lm}" and rm.name == rm.spec
    assert rm.fingerprint()["normalize"] == "mean" and "engine" in rm.fingerprint()
    assert load_rm(f"pmi:hf:{tiny_lm}", normalize="sum", device="cpu").name == f"pmi[sum]:hf:{tiny_lm}"
    data = tmp_path / "b.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(4)), encoding="utf-8")
    none = evaluate(rm, str(data), "none", n_boot=20)
    assert [r.credit for r in none.records] == [0.5] * 4  # no context: every pair a tie
    prof = evaluate(rm, str(data), "profile", n_boot=20)
    assert all(r.credit in (0.0, 1.0) for r in prof.records)
    assert prof.summary.model_info["lik_requests"] > 0


def test_likelihood_reward(tiny_engine: Any) -> None:
    rm = LikelihoodReward(tiny_engine)
    scores = rm.score([(v, r) for v in _views() for r in RESPONSES])
    assert all(s.valid and s.value < 0 for s in scores)


def test_likelihood_reward_via_spec(tiny_lm: Path, tiny_engine: Any) -> None:
    rm = load_rm(f"lik:hf:{tiny_lm}", device="cpu", batch_size=4)
    assert isinstance(rm, LikelihoodReward) and rm.spec == f"lik:hf:{tiny_lm}"
    batch = [(v, r) for v in _views() for r in RESPONSES]
    same = LikelihoodReward(tiny_engine).score(batch)
    assert [s.value for s in rm.score(batch)] == pytest.approx([s.value for s in same], abs=1e-4)
    # the responses to one view share its prompt: the engine ran that prefix once
    assert rm.engine.stats["prefix_tokens_saved"] > 0


# -- the likelihood judge -------------------------------------------------------------------


def test_likelihood_judge_tiny_lm(tiny_engine: Any) -> None:
    judge = load_judge(tiny_engine, mode="likelihood")
    assert isinstance(judge, LikelihoodJudge)
    queries = [PairQuery(v, a, b, seed=i) for i, v in enumerate(_views()) for a, b in [RESPONSES[:2], RESPONSES[1:]]]
    verdicts = judge.compare(queries)
    for v in verdicts:
        assert v.error is None and v.winner in ("A", "B", "tie")
        p = v.meta["p_a"]
        assert 0.0 < p < 1.0 and math.isfinite(v.meta["logp_a"]) and math.isfinite(v.meta["logp_b"])
        assert v.winner == ("A" if p > 0.5 else "B" if p < 0.5 else "tie")
    alone = [judge.compare([q])[0].meta["p_a"] for q in queries]
    assert [v.meta["p_a"] for v in verdicts] == pytest.approx(alone, abs=1e-5)
    fp = judge.fingerprint()
    assert fp["mode"] == "likelihood" and set(fp["prompts"]) == {"judge_choice", "judge_choice_nocontext"}


def test_likelihood_judge_in_evaluation(tiny_lm: Path, tmp_path: Path) -> None:
    data = tmp_path / "b.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(4)), encoding="utf-8")
    res = evaluate(f"judge:hf:{tiny_lm}", str(data), "profile", both_orders=True, n_boot=20,
                   model_options={"mode": "likelihood", "device": "cpu"})
    assert res.summary.model == f"judge[likelihood]:hf:{tiny_lm}"
    assert res.summary.metrics.n_invalid == 0
    assert all(r.credit in (0.0, 0.5, 1.0) for r in res.records)


def test_likelihood_judge_position_debiasing(tiny_engine: Any) -> None:
    plain = load_judge(tiny_engine, mode="likelihood")
    judge = load_judge(tiny_engine, mode="likelihood", debias_position=True)
    assert judge.name.startswith("judge[likelihood-debiased]:") and judge.fingerprint() != plain.fingerprint()
    view = _views()[0]
    q, swapped = PairQuery(view, RESPONSES[0], RESPONSES[1]), PairQuery(view, RESPONSES[1], RESPONSES[0])
    v, w = judge.compare([q, swapped])
    p_raw, p_swapped = (x.meta["p_a"] for x in plain.compare([q, swapped]))
    assert v.meta["p_a"] == pytest.approx((p_raw + 1 - p_swapped) / 2, abs=1e-6)
    # antisymmetric by construction: the swapped query gets exactly the other side
    assert v.meta["p_a"] + w.meta["p_a"] == pytest.approx(1.0, abs=1e-6)
    assert {v.winner, w.winner} == {"A", "B"} or v.winner == w.winner == "tie"


def test_cli_debias_position_reaches_the_likelihood_judge(tiny_lm: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prbench.cli import _register, app

    _register()  # what main() does: attach eval and the other top-level commands
    data = tmp_path / "b.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(3)), encoding="utf-8")
    base = ["eval", "-m", f"judge:hf:{tiny_lm}", "--mode", "likelihood", "--data", str(data), "--device", "cpu",
            "--json"]
    runs = {}
    for flag in ([], ["--debias-position"]):
        r = CliRunner().invoke(app, [*base, *flag, "--out", str(tmp_path / f"runs{len(flag)}")])
        assert r.exit_code == 0, r.output
        (summary,) = json.loads(r.stdout)
        runs[bool(flag)] = summary
    assert runs[True]["model_info"]["fingerprint"]["debias_position"] is True
    assert runs[False]["model_info"]["fingerprint"]["debias_position"] is False
    assert runs[True]["metrics"]["n"] == runs[False]["metrics"]["n"] == 3
