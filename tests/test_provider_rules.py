"""prbench's provider table agrees with the stand-ins' own tables on every documented case.

The stand-ins' rules (`prbench.testing.provider_rules`) are written from the providers' documents
and the openai 3.57.0 SDK types, each with its source; they never import `prbench.engines.providers`.
"""

from __future__ import annotations

import pytest

from prbench import evaluate
from prbench.engines import providers
from prbench.engines.base import GenParams
from prbench.errors import SpecError
from prbench.testing import provider_rules as rules
from prbench.testing.openai_server import refusal

MSG = [{"role": "user", "content": "which is better?"}]
CHAT = "/v1/chat/completions"
SAMPLED = GenParams(max_new_tokens=64, temperature=0.7, top_p=0.9, seed=3)


@pytest.mark.parametrize("model", rules.DOCUMENTED_MODELS["openai"])
def test_openai_reasoning_rules_agree(model: str) -> None:
    mine, theirs = providers.openai_reasoning(model), rules.openai_reasoning(model)
    assert (mine is None) == (theirs is None), model
    base = providers.profile("openai", model)
    assert base.source
    if theirs is None:  # a chat model: sampling, logprobs, up to 4 stops
        assert base.sampling == "both" and base.logprobs and base.max_stop == rules.OPENAI_MAX_STOP
        return
    assert mine.efforts == theirs.efforts and mine.source
    for effort in theirs.efforts:
        p = providers.with_effort(base, effort)
        samples = effort in theirs.sampling_efforts
        assert (p.sampling == "both", p.logprobs, p.stop) == (samples, samples, False), (model, effort)
        kwargs, extra = providers.chat_request(p, model, MSG, SAMPLED)
        assert refusal("openai", CHAT, {**kwargs, **extra}) is None, (model, effort, kwargs)
        assert ("temperature" in kwargs) == samples  # what the model accepts is sent, not dropped
        if p.logprobs:
            assert refusal("openai", CHAT, providers.logprob_request(p, kwargs, 20)) is None
    for effort in {"none", "minimal", "xhigh"} - set(theirs.efforts):  # refused on both sides
        with pytest.raises(SpecError, match="not accepted"):
            providers.with_effort(base, effort)
        kwargs, _ = providers.chat_request(base, model, MSG, GenParams())
        assert refusal("openai", CHAT, {**kwargs, "reasoning_effort": effort})[0] == 400


@pytest.mark.parametrize("model", rules.DOCUMENTED_MODELS["anthropic"])
def test_anthropic_compat_rules_agree(model: str) -> None:
    p = providers.profile("anthropic", model)
    assert (p.sampling == "one") == rules.claude_one_sampler(model), model
    assert p.max_temperature == rules.ANTHROPIC_MAX_TEMPERATURE
    # what the compatibility layer ignores, prbench neither sends nor relies on
    assert p.seed is (rules.ANTHROPIC_COMPAT["seed"] != "ignored")
    assert p.logprobs is (rules.ANTHROPIC_COMPAT["logprobs"] != "ignored")
    assert bool(p.efforts) is (rules.ANTHROPIC_COMPAT["reasoning_effort"] != "ignored")
    kwargs, extra = providers.chat_request(p, model, MSG, SAMPLED)
    assert set(kwargs) | set(extra) <= {f for f, how in rules.ANTHROPIC_COMPAT.items() if how == "supported"}
    assert refusal("anthropic", CHAT, {**kwargs, **extra}) is None


def test_anthropic_compat_ignores_what_anthropic_ignores(fake_openai, api_key_env) -> None:
    ignored = {f: v for f, v in {"seed": 1, "logprobs": True, "top_logprobs": 5, "reasoning_effort": "low",
                                 "user": "u", "metadata": {"a": "b"}}.items()}
    assert all(rules.ANTHROPIC_COMPAT[f] == "ignored" for f in ignored)
    body = {"model": "claude-sonnet-4-5", "messages": MSG, "max_tokens": 8, **ignored}
    assert refusal("anthropic", CHAT, body) is None
    assert refusal("anthropic", CHAT, {**body, "top_k": 5})[0] == 400  # not in the table: refused
    from openai import OpenAI

    srv = fake_openai(lambda b: "A", provider="anthropic")
    reply = OpenAI(base_url=srv.base_url, api_key="k", max_retries=0).chat.completions.create(**body)
    assert reply.choices[0].logprobs is None  # accepted, and without effect


@pytest.mark.parametrize("model", rules.DOCUMENTED_MODELS["gemini"])
def test_gemini_effort_rules_agree(model: str) -> None:
    p = providers.profile("gemini", model)
    assert set(p.efforts) == set(rules.gemini_efforts(model)), model
    kwargs, extra = providers.chat_request(p, model, MSG, SAMPLED)
    assert refusal("gemini", CHAT, {**kwargs, **extra}) is None


def test_every_rule_row_cites_a_source() -> None:
    assert all(r.source and "2026" in r.source for r in providers.OPENAI_REASONING)
    assert all(r.source and "2026" in r.source for r in rules.OPENAI_REASONING)
    assert set(providers.SOURCES) == set(providers.PROVIDERS)
    assert all(providers.profile(p, "m").source for p in providers.PROVIDERS)


def test_gpt51_at_effort_none_judges_by_likelihood(fake_openai, api_key_env, tmp_path) -> None:
    srv = fake_openai(lambda b: "A", provider="openai")
    opts = {"base_url": srv.base_url, "api_key_env": api_key_env[0], "mode": "likelihood"}
    res = evaluate("judge:openai:gpt-5.1", "sample", "none", model_options=opts, limit=2, n_boot=10)
    assert res.summary.metrics.n_invalid == 0 and not srv.refused
    assert all(b["logprobs"] and b["reasoning_effort"] == "none" for b in srv.requests)
    with pytest.raises(SpecError, match="no logprobs"):  # at effort low it samples no more: refused at start
        evaluate("judge:openai:gpt-5.1", "sample", "none", limit=2, n_boot=10,
                 model_options={**opts, "reasoning_effort": "low"})
