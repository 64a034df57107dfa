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
    gen = llm_kwargs("m", tensor_parallel_size=2, max_model_len=4096, seed=3)
    assert gen["runner"] == "generate" and gen["enable_prefix_caching"] is True
    assert gen["tensor_parallel_size"] == 2 and gen["max_model_len"] == 4096 and gen["seed"] == 3
    pool = llm_kwargs("rm", runner="pooling")
    assert pool["runner"] == "pooling" and "enable_prefix_caching" not in pool and "max_model_len" not in pool
    with pytest.raises(SpecError):
        llm_kwargs("m", runner="train")


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
