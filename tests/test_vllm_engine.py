"""vLLM engine: the parts that need no GPU (request construction, parameter mapping, output reading)."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from prbench.engines.base import GenParams, load_engine
from prbench.engines.transformers_engine import chat_ids, split_continuation
from prbench.engines.vllm_engine import (
    choice_kwargs,
    classifier_token_ids,
    llm_kwargs,
    loglik_kwargs,
    raw_pooling_params,
    read_choice_logprobs,
    read_prompt_logprobs,
    sampling_kwargs,
    token_prompt,
)
from prbench.errors import MissingExtra, PrbenchError, SpecError


@dataclass
class Logprob:  # the shape of vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def test_sampling_params_mapping() -> None:
    kw = sampling_kwargs(
        GenParams(max_new_tokens=7, temperature=0.8, top_p=0.9, top_k=None, seed=42, stop=("\n\n",))
    )
    assert kw == {
        "max_tokens": 7,
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "seed": 42,
        "skip_special_tokens": True,
        "stop": ["\n\n"],
    }
    assert sampling_kwargs(GenParams(top_k=20, repetition_penalty=1.3))["top_k"] == 20
    assert "stop" not in sampling_kwargs(GenParams())
    assert loglik_kwargs()["prompt_logprobs"] == 1 and loglik_kwargs()["max_tokens"] == 1
    assert choice_kwargs() == {"max_tokens": 1, "temperature": 0.0, "logprobs": 20}


def test_llm_kwargs() -> None:
    gen, _ = llm_kwargs("m", {"tensor_parallel_size": 2, "max_model_len": 4096, "seed": 3})
    assert gen["runner"] == "generate" and gen["enable_prefix_caching"] is True
    assert gen["tensor_parallel_size"] == 2 and gen["max_model_len"] == 4096 and gen["seed"] == 3
    pool, _ = llm_kwargs("rm", {"runner": "pooling"})
    assert pool["runner"] == "pooling" and "enable_prefix_caching" not in pool and "max_model_len" not in pool
    with pytest.raises(SpecError):
        llm_kwargs("m", {"runner": "train"})


def test_token_prompts_match_transformers_tokenization(tiny_engine) -> None:
    tok = tiny_engine.tokenizer
    msgs = [{"role": "user", "content": "hi"}]
    assert token_prompt(chat_ids(tok, msgs)) == {"prompt_token_ids": tiny_engine.encode_chat(msgs)}
    ids = classifier_token_ids(tok, msgs + [{"role": "assistant", "content": "yo"}])
    assert ids.count(tok.bos_token_id) == 1 and tok.decode(ids).endswith("yo<|end|>")
    assert classifier_token_ids(tok, "plain")[0] == tok.bos_token_id


def test_read_prompt_logprobs(tiny_engine) -> None:
    prompt, cont, _ = split_continuation(tiny_engine.tokenizer, [{"role": "user", "content": "q"}], "ab")
    ids = prompt + cont
    plp = [None] + [{t: Logprob(-0.1 * i), 999: Logprob(-9.0)} for i, t in enumerate(ids[1:], start=1)]
    assert read_prompt_logprobs(plp, ids, len(prompt)) == pytest.approx(
        [-0.1 * i for i in range(len(prompt), len(ids))]
    )
    plp[len(prompt)] = {999: Logprob(-1.0)}
    with pytest.raises(PrbenchError):
        read_prompt_logprobs(plp, ids, len(prompt))


def test_read_choice_logprobs_folds_variants() -> None:
    step = {10: Logprob(-1.0), 11: Logprob(-2.0), 12: Logprob(-0.5)}
    out = read_choice_logprobs(step, {"A": [10, 11], "B": [12], "C": [77]})
    assert out["A"] == pytest.approx(math.log(math.exp(-1.0) + math.exp(-2.0)))
    assert out["B"] == -0.5 and out["C"] == -math.inf


def test_raw_pooling_params_across_versions() -> None:
    class NewStyle:
        def __init__(self, use_activation=None):
            self.use_activation = use_activation

    class OldStyle:
        def __init__(self, activation=None):
            self.activation = activation

    assert raw_pooling_params(SimpleNamespace(PoolingParams=NewStyle)).use_activation is False
    assert raw_pooling_params(SimpleNamespace(PoolingParams=OldStyle)).activation is False


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_missing_vllm_names_the_extra() -> None:
    with pytest.raises(MissingExtra, match=r"prbench\[vllm\]"):
        load_engine("vllm:some/model")


# ---------------------------------------------------------------------------------------------
# Contract with the real vLLM field lists (prbench/testing/vllm/*.json, from the 0.10.1.1 and 0.33.0
# wheels by scripts/refresh_vllm_fields.py) and runs against the stand-in module built from them.
# ---------------------------------------------------------------------------------------------

import json
from pathlib import Path

import tomllib

from prbench.engines.vllm_engine import (
    PRBENCH_OPTIONS,
    check_classifier_architectures,
    prompt_ids,
)
from prbench.testing import fake_vllm

DATA = fake_vllm.DATA  # the field lists ship inside the package (prbench/testing/vllm)
VERSIONS = fake_vllm.VERSIONS
ALL_GEN = GenParams(max_new_tokens=9, temperature=0.5, top_p=0.8, top_k=3, repetition_penalty=1.1,
                    stop=("x",), seed=7)


def fields(version: str) -> dict:
    return json.loads((DATA / f"vllm-{version}.json").read_text())


def test_stored_field_lists_are_the_supported_range_of_the_pin() -> None:
    stored = sorted(p.stem.removeprefix("vllm-") for p in DATA.glob("vllm-*.json"))
    assert stored == sorted(VERSIONS) == ["0.10.1.1", "0.33.0"]
    pin = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["vllm"]
    assert pin == ["vllm>=0.10.1.1,<0.34"]  # oldest: first with runner=; newest: the last one checked
    for v in VERSIONS:
        f = fields(v)
        assert "runner" in f["engine_args"] and "device" not in f["engine_args"]
        assert "batch_size" not in f["engine_args"] and "max_length" not in f["engine_args"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_keyword_the_engine_can_pass_is_real(version: str) -> None:
    f = fields(version)
    llm_ok = set(f["engine_args"]) | set(f["llm_init"])
    option_sets = [{}, {"max_length": 512, "batch_size": 8, "device": "auto", "dtype": "bfloat16", "seed": 1,
                        "trust_remote_code": True}, {"runner": "pooling", "max_length": 128},
                   {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.5}]
    for opts in option_sets:
        kwargs, ignored = llm_kwargs("m", opts, llm_ok, version)
        assert set(kwargs) <= llm_ok, set(kwargs) - llm_ok
        assert ignored == (["batch_size"] if "batch_size" in opts else [])
    sp = set(f["sampling_params"])
    for kw in (sampling_kwargs(ALL_GEN), sampling_kwargs(GenParams()), loglik_kwargs(), choice_kwargs()):
        assert set(kw) <= sp, set(kw) - sp
    mod = fake_vllm.build_module(version)
    pp = raw_pooling_params(mod)
    assert set(vars(pp)) <= set(f["pooling_params"]) and pp.raw()
    assert {"sampling_params", "use_tqdm"} <= set(f["llm_methods"]["generate"])
    assert {"pooling_params", "use_tqdm"} <= set(f["llm_methods"]["classify"])


def test_unknown_and_wrong_options_are_one_clear_error() -> None:
    valid = set(fields("0.33.0")["engine_args"]) | set(fields("0.33.0")["llm_init"])
    with pytest.raises(SpecError, match=r"unknown option\(s\) max_model_length.*max_length.*closest vLLM fields: "
                                        r".*max_model_len") as err:
        llm_kwargs("m", {"max_model_length": 10}, valid, "0.33.0")
    assert "\n" not in str(err.value)
    with pytest.raises(SpecError, match="CUDA_VISIBLE_DEVICES"):
        llm_kwargs("m", {"device": "cuda:1"}, valid)
    with pytest.raises(SpecError, match="disagree"):
        llm_kwargs("m", {"max_length": 10, "max_model_len": 20}, valid)
    assert PRBENCH_OPTIONS == ("max_length", "batch_size", "device", "default_params")


def test_stand_in_refuses_what_vllm_refuses(tiny_lm) -> None:
    for v in VERSIONS:
        mod = fake_vllm.build_module(v)
        with pytest.raises(TypeError, match="batch_size"):
            mod.LLM(model=str(tiny_lm), batch_size=8)
        with pytest.raises(TypeError, match="device"):
            mod.LLM(model=str(tiny_lm), device="cuda")
        with pytest.raises(TypeError):
            mod.SamplingParams(max_new_tokens=3)
    with pytest.raises(TypeError, match="use_activation"):
        fake_vllm.build_module("0.10.1.1").PoolingParams(use_activation=False)
    with pytest.raises(TypeError, match="truncate_prompt_tokens"):
        fake_vllm.build_module("0.33.0").SamplingParams(truncate_prompt_tokens=5)


@pytest.fixture(params=VERSIONS)
def vllm_mod(request):
    with fake_vllm.installed(request.param) as mod:
        yield mod


def test_vllm_engine_matches_transformers(vllm_mod, tiny_lm, tiny_engine) -> None:
    eng = load_engine(f"vllm:{tiny_lm}", batch_size=4, device="auto", max_length=256)
    assert eng.ignored_options == ["batch_size"] and eng.max_model_len == 256
    msgs = [[{"role": "user", "content": "hello"}], [{"role": "user", "content": "what now?"}]]
    greedy = GenParams(max_new_tokens=6)
    assert [g.text for g in eng.generate(msgs, greedy)] == [g.text for g in tiny_engine.generate(msgs, greedy)]
    reqs = [(m, "an answer") for m in msgs]
    for a, b in zip(eng.loglik(reqs), tiny_engine.loglik(reqs)):
        assert a == pytest.approx(b, abs=1e-4)
    vllm_mod.calls.clear()
    got, want = eng.choice_logprobs(msgs, ["A", "B"]), tiny_engine.choice_logprobs(msgs, ["A", "B"])
    for a, b in zip(got, want):  # exact, even where A/B are outside vLLM's top-20 logprobs
        assert a == pytest.approx(b, abs=1e-4) and all(math.isfinite(v) for v in a.values())
    if vllm_mod.__version__ == "0.33.0":  # logprob_token_ids: one request per prompt, no prompt log-probs
        assert vllm_mod.calls == [("generate", 2)]
    else:  # 0.10.1.1: prompt + [token] per spelling variant, with prompt_logprobs
        assert vllm_mod.calls[0][1] > 2
    sampled = [GenParams(max_new_tokens=5, temperature=1.0, seed=s) for s in (1, 1, 2)]
    texts = [g.text for g in eng.generate([msgs[0]] * 3, sampled)]
    assert texts[0] == texts[1]  # seeded per request


def test_over_long_prompts_fail_only_their_own_request(vllm_mod, tiny_lm) -> None:
    eng = load_engine(f"vllm:{tiny_lm}", max_length=48)
    ok = [{"role": "user", "content": "hi"}]
    long = [{"role": "user", "content": "x" * 80}]
    out = eng.generate([ok, long, ok], GenParams(max_new_tokens=100))
    assert out[1].finish_reason == "error" and "max_model_len=48" in out[1].error
    assert out[0].error is None and out[0].n_tokens <= 48 - out[0].meta["prompt_tokens"]
    lik = eng.loglik([(ok, "fine"), (long, "fine")])
    assert math.isnan(lik[1][0]) and all(math.isfinite(v) for v in lik[0])
    cl = eng.choice_logprobs([long, ok], ["A", "B"])
    assert all(math.isnan(v) for v in cl[0].values())
    assert eng.counts["too_long"] == 3 and eng.counts["clamped"] == 2
    with pytest.raises(ValueError, match="longer than the maximum model length"):  # what vLLM itself does
        eng.llm.generate([token_prompt(prompt_ids(eng.tokenizer, m)) for m in (ok, long)],
                         sampling_params=vllm_mod.SamplingParams(max_tokens=1), use_tqdm=False)


def test_judge_pmi_lik_on_vllm(vllm_mod, tiny_lm, tmp_path) -> None:
    from prbench import evaluate
    from prbench.rewards import load_rm
    from prbench.testing.records import make_records

    data = tmp_path / "b.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(2)))
    for spec, opts in ((f"judge:vllm:{tiny_lm}", {"max_new_tokens": 4, "max_length": 1024}),
                       (f"judge:vllm:{tiny_lm}", {"mode": "likelihood", "max_length": 1024}),
                       (f"pmi:vllm:{tiny_lm}", {"max_length": 1024}),
                       (f"lik:vllm:{tiny_lm}", {"max_length": 1024})):
        load_rm(spec, batch_size=4, seed=0, **opts)  # constructs with the evaluator's options
        res = evaluate(spec, str(data), "none", model_options={**opts, "device": "auto"}, n_boot=10)
        m = res.summary.metrics
        assert m.n + m.n_invalid == 2, spec
        reasons = [r.invalid or "" for r in res.records]
        assert not any(x.startswith("engine") for x in reasons), (spec, reasons)  # ran; random text may not parse
        if not spec.startswith("judge:") or opts.get("mode") == "likelihood":
            assert m.n_invalid == 0, (spec, reasons)
    assert {c for c, _ in vllm_mod.calls} == {"generate"}


def test_cli_sample_policy_vllm(vllm_mod, tiny_lm, tmp_path) -> None:
    from typer.testing import CliRunner

    from prbench.cli import command_app
    from prbench.data import write_examples
    from prbench.downstream.sampling import read_samples
    from prbench.schema import Example
    from prbench.testing.records import make_record

    app = command_app("sample")
    items = []
    for i in range(2):
        rec = make_record(i)
        rec["profile"] = rec["profile"][:2]
        items.append(Example.model_validate(rec))
    write_examples(items, tmp_path / "items.jsonl")
    r = CliRunner().invoke(app, ["sample", "--policy", f"vllm:{tiny_lm}", "--data", str(tmp_path / "items.jsonl"),
                                 "--n", "2", "--out", str(tmp_path / "s"), "--top-k", "1", "--max-new-tokens", "4",
                                 "--device", "auto", "--quiet"])
    assert r.exit_code == 0, r.output
    assert sum(len(v) for v in read_samples(tmp_path / "s").samples.values()) == 4


def test_hf_reward_model_on_vllm_pooling(vllm_mod, tiny_rm, tmp_path) -> None:
    from prbench.context.conditions import View
    from prbench.rewards import load_rm
    from prbench.rewards.classifier import SequenceClassifierRM, VLLMClassifierRM

    rm = load_rm(f"hf:{tiny_rm}", engine="vllm", max_length=256, batch_size=4, seed=0)
    ref = SequenceClassifierRM(str(tiny_rm), device="cpu", max_length=256)
    assert isinstance(rm, VLLMClassifierRM) and rm.engine.runner == "pooling"
    views = [View(example_id=str(i), question=f"question {i}?", condition="none") for i in range(2)]
    batch = [(v, r) for v in views for r in ("short answer", "a somewhat longer answer")]
    got, want = rm.score(batch), ref.score(batch)
    assert [s.value for s in got] == pytest.approx([s.value for s in want], abs=1e-4)
    assert ("classify", 4) in vllm_mod.calls


def test_reward_model_heads_vllm_cannot_classify_are_refused(vllm_mod, tiny_rm, tmp_path) -> None:
    import shutil

    from prbench.rewards import load_rm

    bad = tmp_path / "internlm2-like"
    shutil.copytree(tiny_rm, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["architectures"] = ["InternLM2ForRewardModel"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="InternLM2ForRewardModel.*reward-model head.*hf: without engine=vllm"):
        load_rm(f"hf:{bad}", engine="vllm")
    supported = vllm_mod.ModelRegistry.get_supported_archs()
    check_classifier_architectures(["LlamaForSequenceClassification"], supported)
    with pytest.raises(SpecError, match="not one vLLM can classify"):
        check_classifier_architectures(["FooForMaskedLM"], supported)


class MistralTokenizer:
    """The shape of vLLM's MistralTokenizer: no chat_template; apply_chat_template returns ids."""

    def __init__(self, inner):
        self.inner = inner
        self.bos_token_id = inner.bos_token_id

    def apply_chat_template(self, messages, tools=None, **kwargs):
        return self.inner.apply_chat_template(messages, tokenize=True, return_dict=False,
                                              add_generation_prompt=kwargs.get("add_generation_prompt", False))

    def encode(self, text, add_special_tokens=None):
        return self.inner(text, add_special_tokens=bool(add_special_tokens))["input_ids"]


def test_mistral_tokenizer_is_templated_in_one_step(tiny_engine) -> None:
    from prbench.engines.vllm_engine import continuation_ids

    tok = MistralTokenizer(tiny_engine.tokenizer)
    msgs = [{"role": "user", "content": "hi"}]
    ids = prompt_ids(tok, msgs)
    assert ids == tiny_engine.encode_chat(msgs) and ids.count(tok.bos_token_id) == 1  # not "User: ..."
    prompt, cont = continuation_ids(tok, msgs, "yo")
    assert prompt == ids and cont == tiny_engine.tokenizer("yo", add_special_tokens=False)["input_ids"]
    with pytest.raises(SpecError, match="tokenizer_mode='hf'"):
        classifier_token_ids(tok, msgs)
