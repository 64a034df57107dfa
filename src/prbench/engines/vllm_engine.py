"""vLLM offline engine (GPU): all requests of a call go to vLLM at once.

Why: vLLM's continuous batching and prefix caching give the throughput that Best-of-N and
large judge runs need; the engine's job is only to build requests correctly and read results.

- Prompts are tokenized here with the same one-step chat-template rule as the transformers
  engine (`transformers_engine.chat_ids`) and passed as token ids (`{"prompt_token_ids": ...}`)
  to `LLM.generate`, so both engines see identical tokens and no BOS is ever doubled
  (`LLM.chat` would re-render the template inside vLLM; token prompts make the tokens auditable).
- Every request carries its own `SamplingParams(seed=...)`, so results do not depend on batching.
- `loglik` uses `prompt_logprobs` on prompt + continuation (`max_tokens=1`);
  `choice_logprobs` uses `logprobs=20, max_tokens=1` (a choice outside the top 20 gets -inf).
- `score_classifier` runs sequence-classifier reward models with `runner="pooling"` and
  `PoolingParams(use_activation=False)`, i.e. raw logits (the RM's scalar score), through
  `LLM.classify`. Construct the engine with `runner="pooling"` for that.

Everything that does not need vLLM (parameter mapping, request construction, reading
outputs) is a pure function here, unit-tested without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.engines.transformers_engine import apply_stop, chat_ids, choice_token_ids, split_continuation
from prbench.errors import PrbenchError, SpecError
from prbench.extras import require

TOP_LOGPROBS = 20


# ---------------------------------------------------------------------------------------------
# Pure request builders and output readers
# ---------------------------------------------------------------------------------------------


def sampling_kwargs(p: GenParams) -> dict[str, Any]:
    """`SamplingParams` keyword arguments for one request (top_k None -> -1, vLLM's 'disabled')."""
    kwargs: dict[str, Any] = {
        "max_tokens": p.max_new_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": -1 if p.top_k is None else int(p.top_k),
        "repetition_penalty": p.repetition_penalty,
        "seed": int(p.seed),
        "skip_special_tokens": True,
    }
    if p.stop:
        kwargs["stop"] = list(p.stop)
    return kwargs


def loglik_kwargs() -> dict[str, Any]:
    """Teacher forcing: one dummy generated token, log-probs for every prompt token."""
    return {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 1}


def choice_kwargs() -> dict[str, Any]:
    return {"max_tokens": 1, "temperature": 0.0, "logprobs": TOP_LOGPROBS}


def token_prompt(ids: Sequence[int]) -> dict[str, Any]:
    """A vLLM TokensPrompt (a TypedDict, so a plain dict works across versions)."""
    return {"prompt_token_ids": [int(i) for i in ids]}


def _logprob_value(entry: Any) -> float:
    value = getattr(entry, "logprob", entry)
    return float(value)


def read_prompt_logprobs(prompt_logprobs: Sequence[Any], token_ids: Sequence[int], start: int) -> list[float]:
    """Log-probs of `token_ids[start:]` from vLLM's per-position prompt_logprobs (entry 0 is None)."""
    out: list[float] = []
    for pos in range(start, len(token_ids)):
        entry = prompt_logprobs[pos]
        if entry is None or int(token_ids[pos]) not in entry:
            raise PrbenchError(f"vLLM returned no log-prob for prompt position {pos}")
        out.append(_logprob_value(entry[int(token_ids[pos])]))
    return out


def read_choice_logprobs(
    first_step: Mapping[int, Any], token_ids: Mapping[str, Sequence[int]]
) -> dict[str, float]:
    """Fold the token-id -> Logprob map of the first generated step into per-choice values."""
    out: dict[str, float] = {}
    for choice, ids in token_ids.items():
        vals = [_logprob_value(first_step[i]) for i in ids if i in first_step]
        if not vals:
            out[choice] = -math.inf
            continue
        m = max(vals)
        out[choice] = m + math.log(sum(math.exp(v - m) for v in vals))
    return out


def classifier_token_ids(tokenizer: Any, item: str | Messages) -> list[int]:
    """Token ids for a sequence classifier: a chat through its template (no generation prompt),
    a plain string with the tokenizer's own special tokens."""
    if isinstance(item, str):
        return list(tokenizer(item)["input_ids"])
    return chat_ids(tokenizer, item, add_generation_prompt=False)


def llm_kwargs(
    model: str,
    tensor_parallel_size: int = 1,
    dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    seed: int = 0,
    trust_remote_code: bool = False,
    runner: str = "generate",
    **extra: Any,
) -> dict[str, Any]:
    """`vllm.LLM(...)` keyword arguments; prefix caching on for generation."""
    if runner not in ("generate", "pooling"):
        raise SpecError(f"vLLM runner must be 'generate' or 'pooling', not {runner!r}")
    kwargs: dict[str, Any] = {
        "model": model,
        "tensor_parallel_size": tensor_parallel_size,
        "dtype": dtype,
        "gpu_memory_utilization": gpu_memory_utilization,
        "seed": seed,
        "trust_remote_code": trust_remote_code,
        "runner": runner,
    }
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if runner == "generate":
        kwargs["enable_prefix_caching"] = True
    kwargs.update(extra)
    return kwargs


def raw_pooling_params(vllm: Any) -> Any:
    """PoolingParams returning raw classifier logits (no sigmoid/softmax), across vLLM versions."""
    for kwargs in ({"use_activation": False}, {"activation": False}, {"softmax": False}):
        try:
            return vllm.PoolingParams(**kwargs)
        except TypeError:
            continue
    raise PrbenchError("this vLLM version cannot switch off the classifier activation; upgrade vllm")


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class VLLMEngine(Engine):
    """A model served in-process by vLLM. `tokenizer` and `llm` are public."""

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        runner: str = "generate",
        default_params: GenParams | None = None,
        **llm_options: Any,
    ):
        vllm = require("vllm", "vllm")
        self.spec = f"vllm:{model}"
        self.model_id = model
        self.runner = runner
        self.dtype = dtype
        self.default_params = default_params or GenParams()
        self._vllm = vllm
        self.llm = vllm.LLM(
            **llm_kwargs(
                model,
                tensor_parallel_size,
                dtype,
                gpu_memory_utilization,
                max_model_len,
                seed,
                trust_remote_code,
                runner,
                **llm_options,
            )
        )
        self.tokenizer = self.llm.get_tokenizer()

    def __repr__(self) -> str:
        return f"VLLMEngine({self.model_id!r}, runner={self.runner!r})"

    def fingerprint(self) -> dict[str, Any]:
        import hashlib

        template = getattr(self.tokenizer, "chat_template", None) or ""
        return {
            "engine": "vllm",
            "model": self.model_id,
            "chat_template_sha256": hashlib.sha256(str(template).encode("utf-8")).hexdigest(),
            "dtype": str(self.dtype),
            "vllm": getattr(self._vllm, "__version__", None),
        }

    def _need(self, runner: str) -> None:
        if self.runner != runner:
            raise SpecError(
                f"{self.spec} was started with runner={self.runner!r}; this call needs runner={runner!r}"
            )

    def generate(
        self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams] | None = None
    ) -> list[Generation]:
        self._need("generate")
        if params is None:
            params = self.default_params
        plist = [params] * len(prompts) if isinstance(params, GenParams) else list(params)
        if len(plist) != len(prompts):
            raise SpecError(f"got {len(plist)} GenParams for {len(prompts)} prompts")
        requests = [token_prompt(chat_ids(self.tokenizer, m, True)) for m in prompts]
        sps = [self._vllm.SamplingParams(**sampling_kwargs(p)) for p in plist]
        outputs = self.llm.generate(requests, sampling_params=sps, use_tqdm=False)
        gens: list[Generation] = []
        for out, p in zip(outputs, plist):
            comp = out.outputs[0]
            text, stopped = apply_stop(comp.text, p.stop)
            finish = "length" if comp.finish_reason == "length" and not stopped else "stop"
            gens.append(Generation(text=text, finish_reason=finish, n_tokens=len(comp.token_ids)))
        return gens

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        self._need("generate")
        items = [split_continuation(self.tokenizer, m, c)[:2] for m, c in requests]
        todo = [i for i, (_, cont) in enumerate(items) if cont]
        results: list[list[float]] = [[] for _ in items]
        if not todo:
            return results
        sp = self._vllm.SamplingParams(**loglik_kwargs())
        outputs = self.llm.generate(
            [token_prompt(items[i][0] + items[i][1]) for i in todo], sampling_params=sp, use_tqdm=False
        )
        for i, out in zip(todo, outputs):
            prompt, cont = items[i]
            results[i] = read_prompt_logprobs(out.prompt_logprobs, prompt + cont, len(prompt))
        return results

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        self._need("generate")
        ids = {c: choice_token_ids(self.tokenizer, c) for c in choices}
        sp = self._vllm.SamplingParams(**choice_kwargs())
        outputs = self.llm.generate(
            [token_prompt(chat_ids(self.tokenizer, m, True)) for m in prompts],
            sampling_params=sp,
            use_tqdm=False,
        )
        return [read_choice_logprobs(out.outputs[0].logprobs[0], ids) for out in outputs]

    def score_classifier(self, inputs: Sequence[str | Messages]) -> list[list[float]]:
        """Raw logits of a sequence classifier (reward model) for each text or chat."""
        self._need("pooling")
        prompts = [token_prompt(classifier_token_ids(self.tokenizer, item)) for item in inputs]
        outputs = self.llm.classify(prompts, pooling_params=raw_pooling_params(self._vllm), use_tqdm=False)
        return [[float(x) for x in out.outputs.probs] for out in outputs]
