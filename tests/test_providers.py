"""Provider profiles against the strict provider modes of the loopback server.

The strict modes (prbench.testing.openai_server.refusal) refuse what the real APIs refuse; their
sources: the openai client 3.57.0 (`resources/chat/completions/completions.py`: create()'s
parameters, `max_tokens` "not compatible with o-series models"), Anthropic's OpenAI SDK
compatibility page (field table; "temperature and top_p cannot both be specified" for Claude
Sonnet/Haiku 4.5+ and Opus 4.1+), Gemini's OpenAI compatibility (reasoning_effort values per
model, thinking counted inside max_tokens) and llama.cpp's server (no echo).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from prbench import evaluate
from prbench.engines.base import GenParams
from prbench.engines.openai_engine import OpenAIEngine
from prbench.engines.providers import PROVIDERS, chat_request, claude_one_sampler, profile, validate_base_url
from prbench.errors import PrbenchError, SpecError
from prbench.rewards import load_rm
from prbench.testing.cli import run_cli
from prbench.testing.openai_server import refusal, thinking_tokens
from prbench.testing.records import make_records

PRESETS = Path(__file__).resolve().parent.parent / "src" / "prbench" / "presets"
MODES = ("openai", "anthropic", "gemini", "vllm", "llamacpp")
MSG = [{"role": "user", "content": "which is better?"}]


def preset_judges() -> list[tuple[str, dict[str, Any], bool]]:
    """(spec, options, both_orders) of every API judge in the paper presets, as written there."""
    out = []
    for path in sorted(PRESETS.glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        for m in cfg.get("models") or []:
            if m["spec"].startswith("judge:openai:"):
                out.append((m["spec"], dict(m.get("options") or {}), bool(m.get("both_orders"))))
    return out


def records_file(tmp_path: Path, n: int = 3) -> str:
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(n)), encoding="utf-8")
    return str(path)


def judge_reply(body: dict[str, Any]) -> str:
    return "Both are fine; the first fits the user better.\nResult: A"


def test_profiles_follow_host_then_model_family() -> None:
    assert profile(None, "gpt-5.1", "https://api.openai.com/v1").token_param == "max_completion_tokens"
    assert profile(None, "gpt-5.1", "https://api.openai.com/v1").sampling == "both"  # effort none samples
    assert profile(None, "gpt-5", "https://api.openai.com/v1").sampling == "default"
    assert profile(None, "gpt-4o-mini", "https://api.openai.com/v1").sampling == "both"
    assert profile(None, "claude-sonnet-4-6", "https://api.anthropic.com/v1/").sampling == "one"
    assert profile(None, "claude-3-7-sonnet-latest", "http://127.0.0.1:1/v1").sampling == "both"
    assert profile(None, "gemini-3-flash", "http://127.0.0.1:1/v1").provider == "gemini"
    assert profile(None, "Qwen/Qwen2.5-7B", "http://127.0.0.1:8000/v1").provider == "generic"
    assert profile("llamacpp", "anything").echo is False and profile("vllm", "x").echo is True
    assert [claude_one_sampler(m) for m in ("claude-opus-4-1-20250805", "claude-opus-4-20250514",
                                            "claude-haiku-4-5", "claude-sonnet-4-20250514")] == [True, False, True, False]
    with pytest.raises(SpecError, match="unknown provider"):
        profile("azure", "gpt-5")


@pytest.mark.parametrize("mode", MODES)
def test_every_profile_request_is_accepted_by_its_provider(mode: str) -> None:
    models = {"openai": ["gpt-5.1", "gpt-5", "o3-mini", "gpt-4o"], "anthropic": ["claude-sonnet-4-6", "claude-3-5-haiku"],
              "gemini": ["gemini-3-flash", "gemini-3-pro-preview", "gemini-2.5-pro", "gemini-2.0-flash"],
              "vllm": ["Qwen/Qwen2.5-0.5B-Instruct"], "llamacpp": ["local"]}[mode]
    params = [GenParams(), GenParams(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.2, stop=("a", "b", "c", "d", "e", "f"))]
    for model in models:
        p = profile(mode, model)
        for g in params:
            notes: dict[str, int] = {}
            kwargs, extra = chat_request(p, model, MSG, g, notes)
            body = {**kwargs, **extra}
            assert refusal(mode, "/v1/chat/completions", body) is None, (model, body)
            if g.max_new_tokens and p.thinking_in_budget:  # the visible answer still fits after thinking
                limit = body[p.token_param] - thinking_tokens(mode, body)
                assert limit >= g.max_new_tokens, (model, body)


def test_the_old_request_is_refused_where_the_issue_says() -> None:
    old = {"model": "m", "messages": MSG, "max_tokens": 256, "temperature": 0.0, "top_p": 1.0, "seed": 1}
    assert refusal("anthropic", "/v1/chat/completions", {**old, "model": "claude-sonnet-4-6"})[0] == 400
    assert "max_completion_tokens" in str(refusal("openai", "/v1/chat/completions", {**old, "model": "gpt-5.1"}))
    assert refusal("openai", "/v1/chat/completions", {**old, "model": "gpt-4o", "top_k": 5})[0] == 400
    assert refusal("llamacpp", "/v1/completions", {"model": "m", "prompt": "x", "echo": True, "logprobs": 1})[0] == 400
    assert "minimal" in str(refusal("gemini", "/v1/chat/completions",
                                    {**old, "model": "gemini-3-flash", "reasoning_effort": "minimal"}))
    assert thinking_tokens("gemini", {**old, "model": "gemini-3-flash"}) > 256  # default thinking eats it all


@pytest.mark.parametrize("mode", MODES)
def test_preset_judges_run_with_zero_invalid_records(fake_openai, api_key_env, tmp_path: Path, mode: str) -> None:
    judges = preset_judges()  # Claude is on the native API in the presets (tests/test_engines_anthropic.py)
    assert {s for s, _, _ in judges} >= {"judge:openai:gemini-3-flash", "judge:openai:gpt-5.1"}
    data = records_file(tmp_path)
    for spec, options, both in judges:
        srv = fake_openai(judge_reply, provider=mode)
        opts = {**options, "base_url": srv.base_url, "api_key_env": api_key_env[0], "provider": mode}
        res = evaluate(spec, data, "profile", model_options=opts, both_orders=both, n_boot=10)
        assert res.summary.metrics.n_invalid == 0, (spec, mode, res.records[0].invalid)
        assert srv.refused == [] and srv.n_posts == 3 * (2 if both else 1)


@pytest.mark.parametrize("spec", ["judge:openai:gemini-3-flash", "judge:openai:gpt-5.1", "judge:openai:claude-sonnet-4-6"])
def test_preset_judge_profiles_are_detected_without_provider(fake_openai, api_key_env, tmp_path, spec) -> None:
    """The preset's own settings (model family; the loopback host says nothing) pick the right profile."""
    mode = {"gemini": "gemini", "gpt": "openai", "claude": "anthropic"}[spec.split(":")[-1].split("-")[0]]
    srv = fake_openai(judge_reply, provider=mode)
    res = evaluate(spec, records_file(tmp_path), "none", n_boot=10,
                   model_options={"base_url": srv.base_url, "api_key_env": api_key_env[0]})
    assert res.summary.metrics.n_invalid == 0 and srv.refused == []
    assert res.summary.model_info["engine_stats"]["requests"] == 3


def test_generic_requests_fail_against_strict_modes(fake_openai, api_key_env, tmp_path) -> None:
    """The doubles can fail: the pre-profile request gets a 400 (Claude) or an empty, cut reply (Gemini)."""
    srv = fake_openai(judge_reply, provider="anthropic")
    res = evaluate("judge:openai:claude-sonnet-4-6", records_file(tmp_path), "none", n_boot=10,
                   model_options={"base_url": srv.base_url, "api_key_env": api_key_env[0], "provider": "generic"})
    assert res.summary.metrics.n_invalid == 3 and len(srv.refused) == 3
    gem = fake_openai(judge_reply, provider="gemini")
    eng = OpenAIEngine("gemini-3-flash", base_url=gem.base_url, api_key_env=api_key_env[0], provider="generic")
    out = eng.generate([MSG], GenParams(max_new_tokens=256))[0]
    assert out.text == "" and out.finish_reason == "length"
    eng2 = OpenAIEngine("gemini-3-flash", base_url=gem.base_url, api_key_env=api_key_env[0])
    assert eng2.generate([MSG], GenParams(max_new_tokens=256))[0].text.endswith("Result: A")
    assert gem.requests[-1]["reasoning_effort"] == "low" and gem.requests[-1]["max_tokens"] == 256 + 4096


@pytest.mark.parametrize("provider", ["anthropic", "gemini", "openai"])
def test_likelihood_judge_without_logprobs_fails_at_start(fake_openai, api_key_env, tmp_path, provider) -> None:
    srv = fake_openai(judge_reply, provider=provider)
    model = {"anthropic": "claude-sonnet-4-6", "gemini": "gemini-3-flash", "openai": "gpt-5"}[provider]
    with pytest.raises(SpecError, match="no logprobs") as err:
        evaluate(f"judge:openai:{model}", records_file(tmp_path), "none", n_boot=10,
                 model_options={"base_url": srv.base_url, "api_key_env": api_key_env[0], "mode": "likelihood"})
    assert "\n" not in str(err.value) and srv.n_posts == 0


def test_likelihood_judge_with_logprobs_runs_on_vllm_and_llamacpp(fake_openai, api_key_env, tmp_path) -> None:
    for mode in ("vllm", "llamacpp"):
        srv = fake_openai(lambda body: "A", provider=mode)
        judge = load_rm("judge:openai:some-model", mode="likelihood", base_url=srv.base_url,
                        api_key_env=api_key_env[0], provider=mode)
        res = evaluate(judge, records_file(tmp_path), "none", n_boot=10)
        assert res.summary.metrics.n_invalid == 0 and srv.refused == []
    with pytest.raises(SpecError, match="echo"):
        OpenAIEngine("m", base_url=srv.base_url, api_key_env=api_key_env[0], provider="llamacpp").loglik([(MSG, "x")])


@pytest.mark.parametrize("url", ["https://YOUR-ANTHROPIC-COMPATIBLE-ENDPOINT/v1/", "https://<host>/v1",
                                 "https://api.anthröpic.com/v1", "api.openai.com/v1", "https:///v1",
                                 "https://my_host/v1"])
def test_bad_base_urls_fail_before_any_request(url: str, api_key_env) -> None:
    with pytest.raises(SpecError, match="base URL") as err:
        OpenAIEngine("m", base_url=url, api_key_env=api_key_env[0])
    assert "\n" not in str(err.value)
    for ok in ("http://127.0.0.1:8000/v1", "https://api.anthropic.com/v1/", "http://vllm:8000/v1", "http://[::1]:9/v1"):
        assert validate_base_url(ok) == ok


def test_named_key_variable_must_be_set(monkeypatch, fake_openai) -> None:
    srv = fake_openai(judge_reply)
    monkeypatch.delenv("PRBENCH_UNSET_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    eng = OpenAIEngine("m", base_url=srv.base_url, api_key_env="PRBENCH_UNSET_KEY")
    with pytest.raises(PrbenchError, match="PRBENCH_UNSET_KEY"):
        eng.generate([MSG])
    assert srv.n_posts == 0
    assert OpenAIEngine("m", base_url=srv.base_url, api_key_env="PRBENCH_UNSET_KEY",
                        no_api_key=True).generate([MSG])[0].error is None
    assert OpenAIEngine("m", base_url=srv.base_url).generate([MSG])[0].error is None  # implicit key, local host
    with pytest.raises(PrbenchError, match="OPENAI_API_KEY"):
        OpenAIEngine("gemini-3-flash", base_url="https://generativelanguage.googleapis.com/v1beta/openai/")._get_client()


def test_provider_list_is_the_documented_one() -> None:
    assert PROVIDERS == ("openai", "anthropic", "gemini", "vllm", "llamacpp", "generic")


def test_cli_provider_options(fake_openai, api_key_env, tmp_path, capsys) -> None:
    srv = fake_openai(judge_reply, provider="anthropic")
    data = records_file(tmp_path)
    common = ["eval", "-m", "judge:openai:claude-sonnet-4-6", "--data", data, "--base-url", srv.base_url,
              "--api-key-env", api_key_env[0], "--provider", "anthropic", "--quiet"]
    code, out, err = run_cli(capsys, *common, "--mode", "likelihood", "--out", str(tmp_path / "a"))
    assert code != 0 and srv.n_posts == 0
    lines = [ln for ln in (out + err).splitlines() if "logprobs" in ln]
    assert len(lines) == 1 and "anthropic" in lines[0]
    code, out, err = run_cli(capsys, *common, "--rpm", "600", "--out", str(tmp_path / "b"), "--json")
    assert code == 0, out + err
    assert srv.n_posts == 3 and srv.refused == [] and "top_p" not in srv.requests[0]
    code, out, err = run_cli(capsys, "eval", "-m", "judge:openai:m", "--data", data, "--base-url",
                             "https://YOUR-ENDPOINT/v1", "--quiet", "--out", str(tmp_path / "c"))
    assert code != 0 and "placeholder" in out + err and "idna" not in out + err


def test_vllm_server_requests_carry_the_offline_engines_sampling_fields(fake_openai, api_key_env) -> None:
    """`vllm serve` fills omitted fields from generation_config.json (vLLM 0.33 chat_completion/protocol.py,
    `to_sampling_params`); with provider vllm every field the offline `vllm:` engine sets is sent, neutral
    values included, under names vLLM 0.33's ChatCompletionRequest reads (so none is ignored)."""
    from prbench.engines.vllm_engine import sampling_kwargs

    vllm_chat = json.loads((Path(__file__).parent / "data" / "vllm" / "openai-chat-request-0.33.0.json").read_text())
    greedy, custom = GenParams(max_new_tokens=5), GenParams(max_new_tokens=5, temperature=0.7, top_k=40,
                                                            repetition_penalty=1.1)
    srv = fake_openai(lambda body: "ok", provider="vllm")
    eng = OpenAIEngine("Qwen/Qwen2.5-0.5B-Instruct", base_url=srv.base_url, api_key_env=api_key_env[0],
                       provider="vllm")
    eng.generate([MSG], greedy)
    eng.generate([MSG], custom)
    for body, g in zip(srv.requests, (greedy, custom)):
        assert set(body) <= set(vllm_chat["fields"]), sorted(set(body) - set(vllm_chat["fields"]))
        offline = sampling_kwargs(g)
        for name in ("temperature", "top_p", "top_k", "repetition_penalty", "seed", "max_tokens"):
            assert body[name] == offline[name], name
        assert body["min_p"] == 0.0  # SamplingParams' default offline; the server would use generation_config's
        assert body["top_k"] >= -1 and 0.0 <= body["min_p"] <= 1.0  # vLLM 0.33 SamplingParams._verify_args
    # never to other servers: the real OpenAI API refuses these fields (strict mode), generic gets none neutral
    openai_srv = fake_openai(lambda body: "ok", provider="openai")
    OpenAIEngine("gpt-4.1", base_url=openai_srv.base_url, api_key_env=api_key_env[0], provider="openai").generate(
        [MSG], greedy)
    assert openai_srv.refused == [] and not {"top_k", "min_p", "repetition_penalty"} & set(openai_srv.requests[0])
    assert chat_request(profile("generic", "m"), "m", MSG, greedy)[1] == {}
