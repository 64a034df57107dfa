"""OpenAIEngine against the real loopback server: faults, retries, caching, secrecy, logprobs."""

from __future__ import annotations

import json
import logging
import math
import pickle
import time

import pytest

from prbench.engines.base import GenParams, load_engine
from prbench.engines.openai_engine import OpenAIEngine, fold_top_logprobs, parse_retry_after
from prbench.errors import PrbenchError
from prbench.store.cache import Cache
from prbench.testing.openai_server import Fault, fake_logprob, fake_tokenize, logsumexp, per_prompt


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


def engine_for(server, key_env: str, **kw) -> OpenAIEngine:
    opts = {"concurrency": 4, "timeout": 5.0, "max_retries": 3, "backoff_base": 0.01, "backoff_max": 0.05}
    opts.update(kw)
    return OpenAIEngine("fake-model", base_url=server.base_url, api_key_env=key_env, **opts)


def test_generate_maps_params_and_replies(fake_openai, api_key_env) -> None:
    srv = fake_openai(lambda body: "the answer is 42. END more text")
    eng = engine_for(srv, api_key_env[0])
    params = GenParams(max_new_tokens=50, temperature=0.7, top_p=0.9, seed=123, stop=("END",), top_k=5)
    out = eng.generate(prompts(3), params)
    assert [g.text for g in out] == ["the answer is 42. "] * 3
    assert all(g.finish_reason == "stop" and g.error is None for g in out)
    body = srv.requests[0]
    assert body["max_tokens"] == 50 and body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["seed"] == 123 and body["stop"] == ["END"] and body["top_k"] == 5
    assert "repetition_penalty" not in body  # neutral values are not sent (OpenAI rejects unknown fields)
    short = eng.generate(prompts(1), GenParams(max_new_tokens=2))[0]
    assert short.finish_reason == "length" and short.text == "the answer"
    core = {k: eng.stats[k] for k in ("requests", "retries", "failures", "cache_hits")}
    assert core == {"requests": 4, "retries": 0, "failures": 0, "cache_hits": 0}
    assert eng.stats["rate_limited"] == 0 and eng.stats["tokens_out"] == 3 * 5 + 2  # usage.completion_tokens summed


@pytest.mark.parametrize(
    "fault",
    [
        Fault.rate_limit(),
        Fault.rate_limit(retry_after=0.01),
        Fault.server_error(500),
        Fault.server_error(502),
        Fault.server_error(503),
        Fault.http_status(408),
        Fault.delay(1.5),
        Fault.malformed(),
        Fault.truncated(),
        Fault.short_body(),
        Fault.reset(),
    ],
    ids=lambda f: f"{f.kind}-{f.status}-{f.retry_after}",
)
def test_every_fault_is_retried_and_nothing_lost(fake_openai, api_key_env, fault) -> None:
    srv = fake_openai(
        lambda body: "reply " + body["messages"][-1]["content"], faults=per_prompt(fault, times=1)
    )
    eng = engine_for(srv, api_key_env[0], timeout=0.5)
    out = eng.generate(prompts(6), GenParams(max_new_tokens=10))
    assert [g.text for g in out] == [f"reply question {i}" for i in range(6)]
    assert eng.stats["retries"] == 6 and eng.stats["failures"] == 0 and eng.stats["requests"] == 12
    assert srv.n_posts == 12


def test_final_failures_do_not_lose_the_batch_and_are_not_cached(fake_openai, api_key_env, tmp_path) -> None:
    bad = {"question 1", "question 4"}
    srv = fake_openai(
        faults=lambda n, body: Fault.server_error(500) if body["messages"][-1]["content"] in bad else None
    )
    cache = Cache(tmp_path / "c.sqlite")
    eng = engine_for(srv, api_key_env[0], max_retries=2, cache=cache)
    out = eng.generate(prompts(6), GenParams(max_new_tokens=10))
    assert [g.finish_reason for g in out] == ["stop", "error", "stop", "stop", "error", "stop"]
    assert out[1].text == "" and "HTTP 500" in (out[1].error or "") and "3 attempts" in (out[1].error or "")
    assert eng.stats["failures"] == 2 and eng.stats["retries"] == 4 and eng.stats["requests"] == 4 + 2 * 3
    assert eng.last_errors[1] and eng.last_errors[0] is None
    # Client errors other than 408/409/429 are final at once.
    srv2 = fake_openai(faults={1: Fault.http_status(400)})
    eng2 = engine_for(srv2, api_key_env[0], concurrency=1)
    assert eng2.generate(prompts(1), GenParams())[0].finish_reason == "error"
    assert srv2.n_posts == 1 and eng2.stats["retries"] == 0
    # A re-run repeats only the failures.
    before = srv.n_posts
    again = engine_for(srv, api_key_env[0], max_retries=0, cache=cache).generate(
        prompts(6), GenParams(max_new_tokens=10)
    )
    assert srv.n_posts - before == 2 and again[0].text == out[0].text


def test_retry_after_is_honoured_and_capped(fake_openai, api_key_env) -> None:
    srv = fake_openai(faults={1: Fault.rate_limit(retry_after=1)})
    eng = engine_for(srv, api_key_env[0], concurrency=1, backoff_base=0.001, backoff_max=10)
    t0 = time.monotonic()
    assert eng.generate(prompts(1), GenParams())[0].error is None
    waited = time.monotonic() - t0
    assert 0.9 <= waited < 4.0, waited
    srv2 = fake_openai(faults={1: Fault.rate_limit(retry_after=120)})
    eng2 = engine_for(srv2, api_key_env[0], concurrency=1, backoff_max=0.2)
    t0 = time.monotonic()
    assert eng2.generate(prompts(1), GenParams())[0].error is None
    assert time.monotonic() - t0 < 3.0
    assert (
        parse_retry_after("2.5") == 2.5
        and parse_retry_after("soon") is None
        and parse_retry_after(None) is None
    )
    assert 0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.0  # a past date means now


def test_second_run_makes_zero_requests(fake_openai, api_key_env, tmp_path) -> None:
    srv = fake_openai()
    cache = Cache(tmp_path / "cache.sqlite")
    params = [GenParams(max_new_tokens=10, seed=i) for i in range(5)]
    first = engine_for(srv, api_key_env[0], cache=cache).generate(prompts(5), params)
    n = srv.n_posts
    eng = engine_for(srv, api_key_env[0], cache=cache)
    second = eng.generate(prompts(5), params)
    assert srv.n_posts == n == 5
    assert [g.text for g in first] == [g.text for g in second]
    assert eng.stats["cache_hits"] == 5 and eng.stats["requests"] == 0
    assert all(g.meta["cached"] for g in second) and not any(g.meta["cached"] for g in first)
    # A different seed is a different request.
    eng.generate(prompts(1), GenParams(max_new_tokens=10, seed=99))
    assert srv.n_posts == 6


def test_api_key_never_leaks(fake_openai, api_key_env, tmp_path, caplog) -> None:
    name, key = api_key_env
    caplog.set_level(logging.DEBUG)
    srv = fake_openai(
        faults={1: Fault.server_error(503), 2: Fault.rate_limit(retry_after=0.01), 3: Fault.http_status(401)}
    )
    cache = Cache(tmp_path / "secret.sqlite")
    eng = engine_for(srv, name, concurrency=1, cache=cache)
    out = eng.generate(prompts(3), GenParams(max_new_tokens=5))
    eng.choice_logprobs(prompts(1), ["A", "B"])
    assert any(g.error for g in out) and any(not g.error for g in out)
    assert key not in json.dumps(eng.fingerprint())
    assert key not in repr(eng) and key not in str(vars(eng))
    assert key.encode() not in pickle.dumps(eng)
    revived = pickle.loads(pickle.dumps(eng))  # works again (key re-read from the environment)
    ok = next(i for i, g in enumerate(out) if not g.error)
    n_before = srv.n_posts
    assert revived.generate(prompts(3)[ok : ok + 1], GenParams(max_new_tokens=5))[0].text == out[ok].text
    assert srv.n_posts == n_before  # served from the re-opened cache
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert blobs and key.encode() not in blobs
    assert key not in caplog.text and "retry" in caplog.text
    for rec in srv.records:
        lowered = {k.lower(): v for k, v in rec.headers.items()}
        assert lowered["authorization"] == f"Bearer {key}"
        assert all(key not in v for k, v in lowered.items() if k != "authorization")
        assert key not in json.dumps(rec.body)


def test_missing_key_for_openai_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("PRBENCH_NO_SUCH_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    eng = OpenAIEngine("gpt-x", api_key_env="PRBENCH_NO_SUCH_KEY")
    with pytest.raises(PrbenchError, match="PRBENCH_NO_SUCH_KEY"):
        eng._get_client()


def test_base_url_from_environment(monkeypatch, fake_openai, api_key_env) -> None:
    srv = fake_openai(lambda body: "env ok")
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    eng = load_engine("openai:fake-model", api_key_env=api_key_env[0])
    assert eng.generate(prompts(1), GenParams())[0].text == "env ok"


def test_choice_logprobs_via_chat_logprobs(fake_openai, api_key_env) -> None:
    srv = fake_openai(lambda body: "B")
    eng = engine_for(srv, api_key_env[0])
    res = eng.choice_logprobs(prompts(2), ["A", "B", "Z"])
    assert math.isclose(res[0]["B"], logsumexp([-0.25, -2.0]), abs_tol=1e-9)  # "B" and " B" folded
    assert res[0]["A"] == -5.0 and res[0]["Z"] == -math.inf
    body = srv.requests[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert fold_top_logprobs([(" A", -1.0), ("A", -1.0)], ["A"])["A"] == pytest.approx(-1.0 + math.log(2))
    # A failed request yields NaN, not an exception.
    srv2 = fake_openai(faults=lambda n, body: Fault.http_status(404))
    bad = engine_for(srv2, api_key_env[0]).choice_logprobs(prompts(1), ["A"])
    assert math.isnan(bad[0]["A"])


def test_loglik_via_completions_echo(fake_openai, api_key_env, tmp_path) -> None:
    srv = fake_openai(lambda body: " next")
    eng = engine_for(srv, api_key_env[0], cache=Cache(tmp_path / "ll.sqlite"))
    messages = [{"role": "user", "content": "Capital of France?"}]
    res = eng.loglik([(messages, "Paris is nice"), (messages, "")])
    # Plain format: "User: Capital of France?\nAssistant: " + continuation; " Paris" straddles the boundary.
    assert res[0] == [fake_logprob(t) for t in fake_tokenize(" Paris is nice")]
    assert res[1] == []
    body = srv.requests[0]
    assert (
        body["echo"] is True and body["logprobs"] == 1 and body["prompt"].endswith("Assistant: Paris is nice")
    )
    n = srv.n_posts
    assert eng.loglik([(messages, "Paris is nice")]) == [res[0]] and srv.n_posts == n
    srv2 = fake_openai(faults=lambda n, body: Fault.malformed())
    failed = engine_for(srv2, api_key_env[0], max_retries=1).loglik([(messages, "x")])
    assert len(failed) == 1 and math.isnan(failed[0][0])


def test_loglik_with_chat_template_tokenizer(fake_openai, api_key_env, tiny_lm) -> None:
    srv = fake_openai(lambda body: "")
    eng = engine_for(srv, api_key_env[0], tokenizer=str(tiny_lm))
    messages = [{"role": "user", "content": "hi"}]
    res = eng.loglik([(messages, " hello there")])
    body = srv.requests[0]
    assert body["prompt"] == "<|bos|><|user|>hi<|end|><|assistant|> hello there"
    assert body["add_special_tokens"] is False  # the template already wrote the BOS
    assert res[0] == [fake_logprob(" hello"), fake_logprob(" there")]
    assert "chat_template_sha256" in eng.fingerprint()


def test_prompt_cache_key_groups_requests_sharing_a_marked_prefix(fake_openai, api_key_env) -> None:
    """OpenAI: `prompt_cache_key` (openai 3.57.0 `types/chat/completion_create_params.py`) names the shared start;
    the stand-in reports `prompt_tokens_details.cached_tokens` as OpenAI does (1,024 tokens or more, steps of
    128), and the ledger prices them at the cached price. Other providers get no key."""
    from prbench import cost

    srv = fake_openai(lambda body: "Result: A", provider="openai")
    eng = OpenAIEngine("gpt-4.1-mini", base_url=srv.base_url, api_key_env=api_key_env[0])
    led = cost.Ledger(cost.price_for("openai", "gpt-4.1-mini"))
    eng.ledger = led
    heads = ["ctx " * 1300 + "\nQ1\n", "ctx " * 1300 + "\nQ2\n"]
    prompts = [[{"role": "user", "content": h + t, "stable_prefix": h}] for h in heads for t in ("A x B y", "A y B x")]
    eng.generate(prompts, GenParams(seed=1))
    by_item = [[r["prompt_cache_key"] for r in srv.requests if r["messages"][0]["content"].startswith(h)] for h in heads]
    assert len(set(by_item[0])) == len(set(by_item[1])) == 1 and by_item[0][0] != by_item[1][0]
    assert all(r["prompt_cache_key"].startswith("prb-") for r in srv.requests)
    assert len({r["prompt_cache_key"] for r in srv.requests[:2]}) == 2  # one per item first; its second after
    assert all("stable_prefix" not in m for r in srv.requests for m in r["messages"])
    cached = led.total("cached_input_tokens")
    assert cached >= 2 * 1024  # the second of each pair read the first one's prefix
    price = cost.price_for("openai", "gpt-4.1-mini")
    assert led.usd == pytest.approx(price.usd(led.input_tokens, cached, led.total("output_tokens")))
    gemini = fake_openai(lambda body: "Result: A", provider="gemini")
    OpenAIEngine("gemini-2.5-flash", base_url=gemini.base_url, api_key_env=api_key_env[0],
                 provider="gemini").generate(prompts[:1], GenParams(seed=1))
    assert "prompt_cache_key" not in gemini.requests[0]  # implicit caching: the stable start first is all it needs


def test_cache_field_names_are_the_installed_clients() -> None:
    """The names the engine sends and reads are the openai client's own (3.57.0): `prompt_cache_key` in
    `types/chat/completion_create_params.py`, `cached_tokens` in `types/completion_usage.py`."""
    from openai.types.chat import completion_create_params
    from openai.types.completion_usage import PromptTokensDetails

    assert "prompt_cache_key" in completion_create_params.CompletionCreateParamsBase.__annotations__
    assert "cached_tokens" in PromptTokensDetails.model_fields
