"""LLM judges: verdict/score parsing, and pairwise/pointwise/likelihood judges over a real HTTP server."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prbench import evaluate
from prbench.context.conditions import View
from prbench.data import load_examples
from prbench.data.loaders import sample_path
from prbench.rewards import PairQuery, load_rm
from prbench.rewards.judges import (
    LikelihoodJudge,
    PairwiseJudge,
    PointwiseJudge,
    clip_raw,
    load_judge,
    parse_score,
    parse_verdict,
    strip_reasoning,
)
from prbench.testing.openai_server import Fault
from prbench.testing.records import make_records

# -- parsing: curated tables ----------------------------------------------------------------

VERDICTS = [
    ("Result: A", "A"),
    ("Result: B", "B"),
    ("[[A]]", "A"),
    ("My final verdict is [[B]].", "B"),
    ("Final answer: B", "B"),
    ("Final Answer: **A**", "A"),
    ("**Result:** **B**", "B"),
    ('{"winner": "A"}', "A"),
    ('```json\n{"reason": "fits the user", "winner": "Response B"}\n```', "B"),
    ("Response A is better.", "A"),
    ("Overall, Response B is more personalized to this user.", "B"),
    ("I prefer Response A because it mentions hiking.", "A"),
    ("A", "A"),
    ("B.", "B"),
    ("(B)", "B"),
    ("Response A", "A"),
    ("\\boxed{B}", "B"),
    ("Verdict: Response B.", "B"),
    ("Result: (A)", "A"),
    ("A. It fits the person's budget.", "A"),
    ("tie", "tie"),
    ("Result: tie", "tie"),
    ("Verdict: equal.", "tie"),
    ("[[tie]]", "tie"),
    ('{"winner": "tie"}', "tie"),
    ("Both responses are equally good.", "tie"),
    ("Honestly, it's a tie.", "tie"),
    # the last explicit verdict wins; labelled verdicts outrank phrases
    ("Result: A\n\nOn reflection the other one is stronger.\nResult: B", "B"),
    ("Response B is better in tone. Result: A", "A"),
    ("Result: A\nResponse B is better at the budget part, though.", "A"),
    # reasoning blocks are ignored, including unterminated ones
    ("<think>Response A is better... Result: A</think>\nResult: B", "B"),
    ("<think>Result: A. Wait, let me check the budget", None),
    ("Long reasoning without an opening tag </think>\n\nResult: A", "A"),
    ("<thinking>[[B]]</thinking> [[A]]", "A"),
    # no clear verdict -> None (a parse failure, never a side)
    ("Result: A or B", None),
    ("Final answer: A/B", None),
    ("Answer: A good reply would mention the budget.", None),
    ("A good plan should include rest.", None),
    ("Both have merits.", None),
    ("Response A and Response B both address the question.", None),
    ("Result: X", None),
    ("The answer is tied to your budget.", None),
    ("", None),
    ("   \n  ", None),
]


@pytest.mark.parametrize(("text", "expected"), VERDICTS)
def test_parse_verdict_table(text: str, expected: str | None) -> None:
    assert parse_verdict(text) == expected


SCORES = [
    ("Score: 7", 7.0),
    ("It fits the user well.\nScore: 9", 9.0),
    ("7/10", 7.0),
    ("I'd say 8 out of 10.", 8.0),
    ('{"score": 8, "reason": "ok"}', 8.0),
    ("Rating: 8.5", 8.5),
    ("**Score:** 6", 6.0),
    ("Score: 7/10.", 7.0),
    ("[[4]]", 4.0),
    ("10", 10.0),
    ("I'd give it a rating of 6.", 6.0),
    ("Criterion one: 8/10. Criterion two: 4/10. Overall score: 5", 5.0),
    ("<think>Score: 2</think>\nScore: 9", 9.0),
    ("<think>Score: 2", None),
    ("Score: 11", None),       # out of range
    ("Score: 0", None),        # below the scale
    ("score: -1", None),
    ("3/5", None),             # another scale's denominator
    ("Score: N", None),
    ("No rating possible.", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), SCORES)
def test_parse_score_table(text: str, expected: float | None) -> None:
    assert parse_score(text, (1, 10)) == expected


def test_parse_score_other_scale() -> None:
    assert parse_score("Score: 4/5", (1, 5)) == 4.0
    assert parse_score("Score: 7", (1, 5)) is None


def test_strip_reasoning_and_clip() -> None:
    assert strip_reasoning("<think>x</think>answer").strip() == "answer"
    assert strip_reasoning("pre <think>never closed") == "pre "
    assert strip_reasoning("chain</think>out").strip() == "out"
    long = "x" * 1000 + "Result: A"
    clipped = clip_raw(long)
    assert len(clipped) <= 410 and clipped.endswith("Result: A")


# -- parsing: properties --------------------------------------------------------------------

_free_text = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parsers_never_crash(text: str) -> None:
    assert parse_verdict(text) in ("A", "B", "tie", None)
    value = parse_score(text)
    assert value is None or 1 <= value <= 10
    assert isinstance(strip_reasoning(text), str)


@settings(max_examples=200, deadline=None)
@given(_free_text, st.sampled_from(["A", "B"]))
def test_trailing_labelled_verdict_wins(prefix: str, letter: str) -> None:
    """Whatever the reasoning says, a final 'Result: X' line decides."""
    assert parse_verdict(f"{prefix}\n\nResult: {letter}") == letter
    assert parse_verdict(f"<think>{prefix} Result: {'B' if letter == 'A' else 'A'}</think>\nResult: {letter}") == letter


@settings(max_examples=200, deadline=None)
@given(_free_text, st.integers(1, 10))
def test_trailing_score_wins(prefix: str, value: int) -> None:
    assert parse_score(f"{prefix}\nScore: {value}") == value


# -- judges over the loopback OpenAI-compatible server ---------------------------------------


def _records_file(tmp_path: Path, n: int = 8) -> str:
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(n)), encoding="utf-8")
    return str(path)


def _last_user(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def _slot(prompt: str, tag: str) -> str:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    return m.group(1) if m else ""


CHOSEN = {r["chosen"] for r in make_records(8)}


def oracle_reply(body: dict[str, Any]) -> str:
    """A judge that knows the answer key: the response from `chosen` wins."""
    prompt = _last_user(body)
    a = _slot(prompt, "response_a")
    return f"<think>Let me compare.</think>Response A mentions the user's hobby.\nResult: {'A' if a in CHOSEN else 'B'}"


@pytest.fixture()
def key(api_key_env: tuple[str, str]) -> str:
    return api_key_env[0]


def test_pairwise_judge_over_http(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(oracle_reply)
    data = _records_file(tmp_path)
    opts = {"base_url": srv.base_url, "api_key_env": key}
    res = evaluate("judge:openai:fake-model", data, "profile", model_options=opts, both_orders=True, n_boot=50)
    m = res.summary.metrics
    assert m.accuracy == 1.0 and m.n == 8 and m.n_invalid == 0
    assert m.pairwise.position_consistency == 1.0
    assert res.summary.model == "judge:openai:fake-model"
    info = res.summary.model_info
    assert info["judge_parse_failures"] == 0 and info["judge_requests"] == 16
    assert set(info["prompt_hashes"]) == {"judge_pairwise", "judge_pairwise_nocontext"}
    assert info["fingerprint"]["engine"]["model"] == "fake-model"
    # what the judge saw: profile posts, question, both responses; never the answer key
    prompts = [_last_user(b) for b in srv.requests]
    assert all("Earlier posts by this user" in p and "What we know about the person" in p for p in prompts)
    for rec in make_records(8):
        assert not any(rec["narrative"] in p for p in prompts)
        assert not any(rec["rubric_aspects"][1]["reason"] in p for p in prompts)
    # temperature 0 first, the evaluator's per-example seed forwarded
    assert {b.get("temperature") for b in srv.requests} == {0.0}


def test_pairwise_none_condition_has_no_context_block(fake_openai, key: str) -> None:
    srv = fake_openai(oracle_reply)
    judge = load_judge("openai:fake-model", base_url=srv.base_url, api_key_env=key)
    view = View("x", "Where should I hike?", "none")
    [v] = judge.compare([PairQuery(view, make_records(1)[0]["chosen"], "Go shopping.", seed=3)])
    assert v.winner == "A" and v.error is None and "Result: A" in v.raw
    prompt = _last_user(srv.requests[0])
    assert "What we know about the person" not in prompt and "Where should I hike?" in prompt


def test_parse_failure_is_retried_then_counted(fake_openai, key: str) -> None:
    def reply(body: dict[str, Any]) -> str:
        # greedy attempt rambles; the retry (sampled, new seed) answers -- only for "fixable" items
        if body.get("temperature", 0) > 0 and "fixable" in _last_user(body):
            return "Result: B"
        return "Both answers have merits and I cannot decide."

    srv = fake_openai(reply)
    judge = load_judge("openai:fake-model", base_url=srv.base_url, api_key_env=key, retries_on_parse_failure=1)
    qs = [PairQuery(View("1", "fixable question", "none"), "x", "y", seed=1),
          PairQuery(View("2", "hopeless question", "none"), "x", "y", seed=2)]
    v1, v2 = judge.compare(qs)
    assert v1.winner == "B" and v1.meta["attempts"] == 2
    assert v2.winner is None and v2.error is None and v2.meta["attempts"] == 2 and "cannot decide" in v2.raw
    info = judge.run_info()
    assert info["judge_parse_failures"] == 1 and info["judge_retried"] == 2 and info["judge_recovered_by_retry"] == 1
    seeds = [b.get("seed") for b in srv.requests]
    assert len(set(seeds)) == 4  # retries use derived seeds, never the first attempt's

    srv.clear()
    judge0 = load_judge("openai:fake-model", base_url=srv.base_url, api_key_env=key, retries_on_parse_failure=0)
    [v] = judge0.compare(qs[1:])
    assert v.winner is None and len(srv.requests) == 1


def test_unparseable_verdicts_are_invalid_in_evaluation(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(lambda body: "I like both.")
    res = evaluate("judge:openai:fake-model", _records_file(tmp_path, 4), "none",
                   model_options={"base_url": srv.base_url, "api_key_env": key}, n_boot=20)
    m = res.summary.metrics
    assert m.n_invalid == 4 and m.n == 0
    assert all(r.credit is None and r.invalid == "unparseable verdict" for r in res.records)


def test_engine_errors_become_verdict_errors(fake_openai, key: str) -> None:
    srv = fake_openai(oracle_reply, faults=lambda n, body: Fault.http_status(400))
    judge = load_judge("openai:fake-model", base_url=srv.base_url, api_key_env=key, max_retries=0)
    [v] = judge.compare([PairQuery(View("1", "q", "none"), "x", "y")])
    assert v.winner is None and v.error and v.error.startswith("engine:")
    assert judge.run_info()["judge_engine_errors"] == 1
    assert len(srv.requests) == 1  # an engine error is not a parse failure: no judge retry


def test_pointwise_judge_over_http(fake_openai, key: str, tmp_path: Path) -> None:
    def reply(body: dict[str, Any]) -> str:
        return "Fits this person.\nScore: 9" if _slot(_last_user(body), "response") in CHOSEN else "Score: 3/10"

    srv = fake_openai(reply)
    res = evaluate("judge:openai:fake-model", _records_file(tmp_path), "oracle", n_boot=20,
                   model_options={"mode": "pointwise", "base_url": srv.base_url, "api_key_env": key})
    assert res.summary.metrics.accuracy == 1.0
    assert res.summary.model == "judge[pointwise]:openai:fake-model"
    assert res.records[0].score_chosen == 9.0 and res.records[0].score_rejected == 3.0
    prompt = _last_user(srv.requests[0])
    assert "What this user expects from an answer" in prompt and "from 1 (" in prompt

    srv2 = fake_openai(lambda body: "Score: 42")
    judge = load_judge("openai:fake-model", mode="pointwise", scale=(1, 10), base_url=srv2.base_url,
                       api_key_env=key, retries_on_parse_failure=0)
    assert isinstance(judge, PointwiseJudge)
    [s] = judge.score([(View("1", "q", "none"), "resp")])
    assert math.isnan(s.value) and s.error == "parse failure" and not s.valid
    assert judge.run_info()["judge_parse_failures"] == 1


def test_likelihood_judge_over_http(fake_openai, key: str) -> None:
    """The fake server's top-20 logprobs favour the reply's first token; reply the chosen slot."""
    srv = fake_openai(lambda body: "A" if "Response A:\nSpend" in _last_user(body) else "B")
    judge = load_judge("openai:fake-model", mode="likelihood", base_url=srv.base_url, api_key_env=key)
    assert isinstance(judge, LikelihoodJudge)
    assert judge.name == "judge[likelihood]:openai:fake-model" and judge.spec == "judge:openai:fake-model"
    chosen = make_records(1)[0]["chosen"]
    view = View("1", "q", "none")
    va, vb = judge.compare([PairQuery(view, chosen, "Go shopping."), PairQuery(view, "Go shopping.", chosen)])
    assert va.winner == "A" and va.meta["p_a"] > 0.9
    assert vb.winner == "B" and vb.meta["p_a"] < 0.1
    assert srv.requests[0]["max_tokens"] == 1 and srv.requests[0]["logprobs"] is True


def test_load_rm_names_fingerprints_and_modes(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(oracle_reply)
    kw = {"base_url": srv.base_url, "api_key_env": key, "batch_size": 4, "seed": 0}
    pw = load_rm("judge:openai:m", **kw)
    pt = load_rm("judge:openai:m", mode="pointwise", **kw)
    assert isinstance(pw, PairwiseJudge) and isinstance(pt, PointwiseJudge)
    assert pw.name == "judge:openai:m" and pt.name == "judge[pointwise]:openai:m"
    assert pw.fingerprint() != pt.fingerprint()
    custom = tmp_path / "mine.txt"
    custom.write_text("Q: {{question}}\nC: {{context}}\nA: {{response_a}}\nB: {{response_b}}\nResult?", encoding="utf-8")
    mine = load_rm("judge:openai:m", prompt_file=str(custom), **kw)
    assert mine.fingerprint()["prompts"] != pw.fingerprint()["prompts"]
    mine.compare([PairQuery(View("1", "the q", "none"), "x", "y")])
    assert _last_user(srv.requests[-1]).startswith("Q: the q\nC: (Nothing is known")
    with pytest.raises(Exception, match="mode"):
        load_rm("judge:openai:m", mode="ranking", **kw)


# -- the real small model -------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_pairwise_judge_end_to_end(tmp_path: Path) -> None:
    """SmolLM2-135M as a pairwise judge through the evaluator, both orders.

    A 135M model rarely writes a readable verdict (0 of 32 on the sample at 64 tokens): those
    pairs must come out invalid ("unparseable verdict"), never as a side or a tie.
    """
    data: str = "sample"
    if not sample_path("sample").is_file():
        data = _records_file(tmp_path, 4)
    # A short generation budget and no retry bound the cost: 8 prompts of ~500 tokens, 48 new tokens each.
    res = evaluate("judge:builtin:smollm2-135m-instruct", data, "none", both_orders=True, limit=4, n_boot=50,
                   model_options={"mode": "pairwise", "max_new_tokens": 48, "retries_on_parse_failure": 0})
    assert len(res.records) == 4
    assert res.summary.model == "judge:builtin:smollm2-135m-instruct"
    info = res.summary.model_info
    assert info["judge_requests"] == 8
    for rec in res.records:
        assert len(rec.verdicts) == 2
        assert all(v in ("A", "B", "tie", None) for v in rec.verdicts)
        assert rec.credit in (0.0, 0.5, 1.0, None)
        if None in rec.verdicts:
            assert rec.credit is None and rec.invalid == "unparseable verdict"
    if data == "sample":
        assert load_examples("sample", limit=4)[0].id == res.records[0].id


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_cache_aware_layout_sends_the_same_text_and_keeps_every_verdict(kind: str, api_key_env, tmp_path) -> None:
    """#38: the stable start marked for caching (Anthropic breakpoint, OpenAI prompt_cache_key) changes what is
    billed, never what the model reads: the same texts reach the stand-in, the parsed verdicts and the
    position-consistency control (both orders) are identical to the plain layout's."""
    from prbench import evaluate
    from prbench.testing.anthropic_server import _text, serve_anthropic
    from prbench.testing.openai_server import serve

    def reply(body: dict) -> str:  # the verdict depends on the exact text, and flips with the order
        text = body["messages"][-1]["content"]
        return f"Brief reason.\nResult: {'AB'[sum(map(ord, text)) % 2]}"

    spec = {"openai": "judge:openai:gpt-4.1-mini", "anthropic": "judge:anthropic:claude-haiku-4-5"}[kind]
    server = serve(reply, provider="openai") if kind == "openai" else serve_anthropic(reply, min_cache_tokens=30)
    runs, texts = {}, {}
    with server as srv:
        url = srv.base_url if kind == "openai" else srv.root_url
        for layout, on in (("plain", False), ("cached", True)):
            n = len(srv.requests)
            runs[layout] = evaluate(spec, "sample", "profile", out=tmp_path / layout, limit=6, both_orders=True,
                                    n_boot=10, model_options={"base_url": url, "api_key_env": api_key_env[0],
                                                              "prompt_cache": on})
            texts[layout] = sorted(_text(r["messages"][-1]["content"]) for r in srv.requests[n:])
        marked = srv.requests[n:]
    plain, cached = runs["plain"], runs["cached"]
    assert texts["plain"] == texts["cached"]
    assert [r.verdicts for r in plain.records] == [r.verdicts for r in cached.records]
    assert [r.model_dump(exclude={"elapsed_s"}) for r in plain.records] == \
        [r.model_dump(exclude={"elapsed_s"}) for r in cached.records]
    diag = [r.summary.metrics.pairwise for r in (plain, cached)]
    assert diag[0] == diag[1] and diag[0].position_consistency is not None  # the position-bias control, unchanged
    if kind == "openai":
        assert all(r["prompt_cache_key"].startswith("prb-") for r in marked)
    else:  # the second order of each pair read the first one's cached start
        assert all(isinstance(r["messages"][-1]["content"], list) for r in marked)
        assert cached.summary.cost.cached_input_tokens > 0 == plain.summary.cost.cached_input_tokens
        assert cached.summary.cost.usd < plain.summary.cost.usd
