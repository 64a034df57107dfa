"""vLLM offline engine (GPU): all requests of a call go to vLLM at once.

Why: vLLM's continuous batching and prefix caching give the throughput that Best-of-N and
large judge runs need; the engine's job is only to build requests correctly and read results.

- Prompts are tokenized here with the same one-step chat-template rule as the transformers
  engine (`transformers_engine.chat_ids`) and passed as token ids (`{"prompt_token_ids": ...}`)
  to `LLM.generate`, so both engines see identical tokens and no BOS is ever doubled
  (`LLM.chat` would re-render the template inside vLLM; token prompts make the tokens auditable).
- Every request carries its own `SamplingParams(seed=...)`, so results do not depend on batching.
- `loglik` uses `prompt_logprobs` on prompt + continuation (`max_tokens=1`).
  `choice_logprobs` reads each choice token's exact log-prob, never from the top-20 `logprobs`
  (an unlikely choice is not -inf): with `SamplingParams.logprob_token_ids` (vLLM >= 0.33) one
  request per prompt returns exactly those tokens' first-step log-probs; older vLLM scores
  prompt + [token] with `prompt_logprobs`. The first keeps the prefix cache: vLLM skips reading
  it for any request with prompt log-probs (0.33 `sampling_params.py`, `skip_reading_prefix_cache`).
- `score_classifier` runs sequence-classifier reward models with `runner="pooling"` and the
  activation off (`use_activation=False`, `activation=False` on 0.10.x), i.e. raw logits (the
  RM's scalar score), through `LLM.classify`. `hf:DIR` RMs get it with the option `engine=vllm`.
- Only real keywords reach `vllm.LLM`: the installed version's `EngineArgs` fields and
  `LLM.__init__` parameters (checked against field lists read from the real 0.10.1.1 and
  0.33.0 wheels in the tests); prbench's `max_length` becomes `max_model_len`, `batch_size`
  is dropped, `device` must be auto/cuda. Mistral-format tokenizers (vLLM's own, without a
  `chat_template`) are templated through their `apply_chat_template`, still in one step.
- A prompt longer than max_model_len fails only its own request (vLLM would reject the whole
  call), counted in `counts["too_long"]`.
- Determinism: vLLM's results can depend on batch composition (kernels pick tile sizes by
  batch shape). Where byte-identical outputs across batchings matter, run with
  `VLLM_BATCH_INVARIANT=1` (vLLM >= 0.11; slower); seeds alone do not guarantee it.

Everything that does not need vLLM (parameter mapping, request construction, reading
outputs) is a pure function here, unit-tested without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prbench.engines.base import Engine, Generation, GenParams, Messages, logsumexp
from prbench.engines.transformers_engine import apply_stop, chat_ids, choice_token_ids, split_continuation
from prbench.errors import PrbenchError, SpecError
from prbench.runtime.extras import require
from prbench.specs import OpenOptions, model_or_builtin

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


MAX_LOGPROB_TOKEN_IDS = 128  # vLLM 0.33 sampling_params.py: the sampler's per-request row width


def token_logprob_kwargs(vllm: Any, token_ids: Sequence[int]) -> dict[str, Any] | None:
    """First-step log-probs of exactly `token_ids`, no prompt log-probs; None where vLLM lacks it."""
    if "logprob_token_ids" not in getattr(vllm.SamplingParams, "__struct_fields__", ()):
        return None
    if not 0 < len(token_ids) <= MAX_LOGPROB_TOKEN_IDS:
        return None
    return {"max_tokens": 1, "temperature": 0.0, "logprob_token_ids": [int(t) for t in token_ids]}


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
    return {choice: logsumexp([_logprob_value(first_step[i]) for i in ids if i in first_step])
            for choice, ids in token_ids.items()}


def is_mistral_tokenizer(tokenizer: Any) -> bool:
    """vLLM's own Mistral tokenizer (tokenizer_mode auto/mistral on Mistral-format repos): no
    `chat_template` attribute; its `apply_chat_template` returns token ids directly."""
    return type(tokenizer).__name__ == "MistralTokenizer" or "mistral" in type(tokenizer).__module__.lower()


def prompt_ids(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a chat in one templating step, for HF and Mistral tokenizers alike.

    Why: a Mistral tokenizer has no `chat_template`, so `chat_ids` would fall back to the plain
    "User:/Assistant:" format and silently change every prompt.
    """
    if is_mistral_tokenizer(tokenizer):
        ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt)
        return [int(i) for i in ids]
    return chat_ids(tokenizer, messages, add_generation_prompt)


def _mistral_encode(tokenizer: Any, text: str) -> list[int]:
    try:
        return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
    except TypeError:  # vLLM < 0.11: encode(text) adds BOS
        ids = [int(i) for i in tokenizer.encode(text)]
        bos = getattr(tokenizer, "bos_token_id", None)
        return ids[1:] if ids and ids[0] == bos else ids


def continuation_ids(tokenizer: Any, messages: Messages, continuation: str) -> tuple[list[int], list[int]]:
    """(prompt ids, continuation ids) for teacher forcing; see `split_continuation` for HF."""
    if is_mistral_tokenizer(tokenizer):
        prompt = prompt_ids(tokenizer, messages, True)
        return prompt, (_mistral_encode(tokenizer, continuation) if continuation else [])
    prompt, cont, _ = split_continuation(tokenizer, messages, continuation)
    return prompt, cont


def classifier_token_ids(tokenizer: Any, item: str | Messages) -> list[int]:
    """Token ids for a sequence classifier: a chat through its template (no generation prompt),
    a plain string with the tokenizer's own special tokens."""
    if is_mistral_tokenizer(tokenizer):
        raise SpecError("vLLM loaded a Mistral-format tokenizer for a classifier; pass tokenizer_mode='hf'")
    if isinstance(item, str):
        return list(tokenizer(item)["input_ids"])
    return chat_ids(tokenizer, item, add_generation_prompt=False)


# Options prbench's callers give every engine (evaluate: batch_size; CLI: device, max_length).
PRBENCH_OPTIONS = ("max_length", "batch_size", "device", "default_params")
DEFAULTS: dict[str, Any] = {"tensor_parallel_size": 1, "dtype": "auto", "gpu_memory_utilization": 0.9,
                            "seed": 0, "trust_remote_code": False, "runner": "generate"}
RUNNERS = ("generate", "pooling")


def valid_llm_keywords(vllm: Any) -> set[str] | None:
    """Keywords `vllm.LLM(...)` accepts: its named parameters plus every `EngineArgs` field (LLM
    forwards the rest of its keywords into `EngineArgs`). None when vLLM cannot be introspected."""
    import dataclasses
    import inspect

    try:
        fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        params = inspect.signature(vllm.LLM.__init__).parameters
    except (AttributeError, TypeError, ValueError):
        return None
    named = {n for n, p in params.items() if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return fields | named


def llm_kwargs(model: str, options: Mapping[str, Any] | None = None, valid: set[str] | None = None,
               version: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """(`vllm.LLM(...)` keyword arguments, names of prbench options vLLM has no use for).

    `max_length` becomes `max_model_len`; `batch_size` is dropped (vLLM schedules its own
    batches); `device` must be auto/cuda (vLLM uses the visible GPUs). Every other key must be a
    real `EngineArgs`/`LLM` keyword of the installed vLLM (`valid`), else one SpecError naming
    prbench's options and the closest vLLM fields. Prefix caching is on for generation.
    """
    import difflib

    opts = dict(options or {})
    ignored: list[str] = []
    max_length = opts.pop("max_length", None)
    if max_length is not None:
        if opts.get("max_model_len") not in (None, max_length):
            raise SpecError(f"vllm: max_length={max_length} and max_model_len={opts['max_model_len']} disagree")
        opts["max_model_len"] = int(max_length)
    if opts.pop("batch_size", None) is not None:
        ignored.append("batch_size")
    device = opts.pop("device", None)
    if device not in (None, "auto", "cuda", "gpu"):
        raise SpecError(f"vllm: device={device!r} is not a vLLM option: vLLM runs on the visible GPUs "
                        "(CUDA_VISIBLE_DEVICES=1 for cuda:1; an hf: engine for CPU)")
    kwargs: dict[str, Any] = {**DEFAULTS, "model": model, **opts}
    if kwargs["runner"] not in RUNNERS:
        raise SpecError(f"vLLM runner must be 'generate' or 'pooling', not {kwargs['runner']!r}")
    if kwargs.get("max_model_len") is not None:
        kwargs["max_model_len"] = int(kwargs["max_model_len"])
    if kwargs["runner"] == "generate":
        kwargs.setdefault("enable_prefix_caching", True)
    if valid is not None:
        unknown = sorted(k for k in kwargs if k not in valid)
        if unknown:
            close = sorted({c for k in unknown for c in difflib.get_close_matches(k, sorted(valid), n=3, cutoff=0.6)})
            hint = f"; closest vLLM fields: {', '.join(close)}" if close else ""
            raise SpecError(
                f"vllm: unknown option(s) {', '.join(unknown)} for vLLM {version or '?'}: prbench takes "
                f"{', '.join(PRBENCH_OPTIONS)}, and any vllm.EngineArgs field "
                f"(e.g. max_model_len, tensor_parallel_size, gpu_memory_utilization, dtype, quantization){hint}"
            )
    return kwargs, ignored


def raw_pooling_params(vllm: Any) -> Any:
    """PoolingParams returning raw classifier logits (activation off): `use_activation=False`
    (vLLM >= 0.11), `activation=False` (0.10.x). Chosen by the struct's field list when it has one."""
    fields = getattr(vllm.PoolingParams, "__struct_fields__", None)
    for name in ("use_activation", "activation"):
        if fields is not None and name not in fields:
            continue
        try:
            return vllm.PoolingParams(**{name: False})
        except TypeError:
            continue
    raise PrbenchError("this vLLM version cannot switch off the classifier activation; use vllm>=0.10.1")


def check_classifier_architectures(architectures: Sequence[str], supported: Sequence[str] | None) -> None:
    """Refuse, before loading weights, a checkpoint vLLM's pooling runner cannot classify.

    Reward-model heads (InternLM2ForRewardModel, Qwen2ForRewardModel) are per-token reward
    models in vLLM, not sequence classifiers: `LLM.classify` would fail or score the wrong thing.
    `*ForSequenceClassification` checkpoints vLLM converts from their causal-LM architecture.
    """
    archs = list(architectures or [])
    if not archs:
        raise SpecError("vllm pooling: the checkpoint's config.json names no architecture")
    for arch in archs:
        if "RewardModel" in arch:
            raise SpecError(f"vllm pooling: {arch} is a reward-model head that vLLM cannot run as a sequence "
                            "classifier; score it with the transformers engine (hf: without engine=vllm)")
        if arch.endswith("ForSequenceClassification"):
            base = arch[: -len("ForSequenceClassification")] + "ForCausalLM"
            if supported is None or arch in supported or base in supported:
                return
        elif supported is not None and arch in supported:
            return
    raise SpecError(f"vllm pooling: architecture {', '.join(archs)} is not one vLLM can classify "
                    "(use hf: without engine=vllm)")


def model_max_len(llm: Any, fallback: int | None) -> int | None:
    """The engine's effective max_model_len (vLLM derives it from the config when not given)."""
    for path in (("llm_engine", "model_config", "max_model_len"), ("model_config", "max_model_len")):
        obj: Any = llm
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, int):
            return obj
    return fallback


def resolve_model(model: str) -> str:
    """`builtin:NAME` -> the built-in checkpoint's folder; anything else unchanged."""
    if model.startswith("builtin:"):
        from prbench.engines.builtin import builtin_path

        return str(builtin_path(model.split(":", 1)[1]))
    return model


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class VLLMOptions(OpenOptions):
    """prbench's options of the vLLM engine; any other is checked against the installed `vllm.EngineArgs`."""

    device: str | None = None
    dtype: str | None = None
    max_length: int | None = None
    batch_size: int | None = None
    trust_remote_code: bool | None = None
    default_params: Any = None  # a GenParams


class VLLMEngine(Engine):
    """A model served in-process by vLLM. `tokenizer` and `llm` are public.

    Options: prbench's `max_length` (-> max_model_len), `batch_size` (dropped: vLLM batches
    itself), `device` (auto/cuda), `default_params`, and any real `vllm.EngineArgs` field of the
    installed version; anything else is one SpecError before vLLM starts. A prompt longer than
    max_model_len fails that request only (counted in `counts["too_long"]`); a request whose
    max_new_tokens would run past max_model_len is shortened (`counts["clamped"]`).
    """

    options_model = VLLMOptions
    resolve_spec = staticmethod(model_or_builtin)

    def __init__(self, model: str, default_params: GenParams | None = None, **options: Any):
        vllm = require("vllm", "vllm")
        self.spec = f"vllm:{model}"
        self.model_id = model
        self._vllm = vllm
        self.version = getattr(vllm, "__version__", None)
        kwargs, self.ignored_options = llm_kwargs(resolve_model(model), options, valid_llm_keywords(vllm),
                                                  self.version)
        self.llm_options = kwargs
        self.runner = kwargs["runner"]
        self.dtype = kwargs["dtype"]
        self.default_params = default_params or GenParams()
        if self.runner == "pooling":
            check_classifier_architectures(_config_architectures(kwargs), _supported_archs(vllm))
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = model_max_len(self.llm, kwargs.get("max_model_len"))
        self.counts = {"requests": 0, "too_long": 0, "clamped": 0}

    def __repr__(self) -> str:
        return f"VLLMEngine({self.model_id!r}, runner={self.runner!r})"

    def fingerprint(self) -> dict[str, Any]:
        import hashlib

        if is_mistral_tokenizer(self.tokenizer):
            template = f"mistral-tokenizer:{type(self.tokenizer).__name__}:{getattr(self.tokenizer, 'version', '')}"
        else:
            template = getattr(self.tokenizer, "chat_template", None) or ""
        return {
            "engine": "vllm",
            "model": self.model_id,
            "chat_template_sha256": hashlib.sha256(str(template).encode("utf-8")).hexdigest(),
            "dtype": str(self.dtype),
            "max_model_len": self.max_model_len,
            "vllm": self.version,
        }

    def run_info(self) -> dict[str, Any]:
        return {"engine_counts": dict(self.counts), "ignored_options": list(self.ignored_options)}

    def _need(self, runner: str) -> None:
        if self.runner != runner:
            raise SpecError(
                f"{self.spec} was started with runner={self.runner!r}; this call needs runner={runner!r}"
            )

    def _fits(self, n_tokens: int, room: int) -> bool:
        """Whether a prompt of n_tokens leaves `room` tokens within max_model_len; counts the misses."""
        ok = self.max_model_len is None or n_tokens + room <= self.max_model_len
        if not ok:
            self.counts["too_long"] += 1
        return ok

    def _too_long(self, n_tokens: int) -> str:
        return f"prompt of {n_tokens} tokens does not fit max_model_len={self.max_model_len}"

    def _run(self, prompts: list[list[int]], params: Any) -> list[Any]:
        self.counts["requests"] += len(prompts)
        if not prompts:
            return []
        return list(self.llm.generate([token_prompt(p) for p in prompts], sampling_params=params, use_tqdm=False))

    def generate(
        self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams] | None = None
    ) -> list[Generation]:
        self._need("generate")
        if params is None:
            params = self.default_params
        plist = [params] * len(prompts) if isinstance(params, GenParams) else list(params)
        if len(plist) != len(prompts):
            raise SpecError(f"got {len(plist)} GenParams for {len(prompts)} prompts")
        ids = [prompt_ids(self.tokenizer, m, True) for m in prompts]
        gens: list[Generation | None] = [None] * len(prompts)
        todo, sps = [], []
        for i, (p_ids, p) in enumerate(zip(ids, plist)):
            if not self._fits(len(p_ids), 1):
                gens[i] = Generation(text="", finish_reason="error", error=self._too_long(len(p_ids)))
                continue
            kw = sampling_kwargs(p)
            if self.max_model_len is not None and len(p_ids) + kw["max_tokens"] > self.max_model_len:
                kw["max_tokens"] = self.max_model_len - len(p_ids)
                self.counts["clamped"] += 1
            todo.append(i)
            sps.append(self._vllm.SamplingParams(**kw))
        outputs = self._run([ids[i] for i in todo], sps)
        for i, out in zip(todo, outputs):
            comp = out.outputs[0]
            text, stopped = apply_stop(comp.text, plist[i].stop)
            finish = "length" if comp.finish_reason == "length" and not stopped else "stop"
            gens[i] = Generation(text=text, finish_reason=finish, n_tokens=len(comp.token_ids),
                                 meta={"prompt_tokens": len(ids[i])})
        return [g for g in gens if g is not None]

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        """Continuation log-probs; a request that does not fit max_model_len gives `[nan]` (counted)."""
        self._need("generate")
        items = [continuation_ids(self.tokenizer, m, c) for m, c in requests]
        results: list[list[float]] = [[] for _ in items]
        todo = []
        for i, (prompt, cont) in enumerate(items):
            if not cont:
                continue
            if self._fits(len(prompt) + len(cont), 1):
                todo.append(i)
            else:
                results[i] = [math.nan]
        sp = self._vllm.SamplingParams(**loglik_kwargs())
        outputs = self._run([items[i][0] + items[i][1] for i in todo], sp)
        for i, out in zip(todo, outputs):
            prompt, cont = items[i]
            results[i] = read_prompt_logprobs(out.prompt_logprobs, prompt + cont, len(prompt))
        return results

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        """Exact first-token log-probs of each choice spelling (see the module docstring), so a
        choice outside vLLM's top-k logprobs is still scored; a prompt that does not fit gives NaN
        for every choice."""
        self._need("generate")
        tok_ids = {c: choice_token_ids(self.tokenizer, c) for c in choices}
        variants = sorted({t for ids in tok_ids.values() for t in ids})
        ids = [prompt_ids(self.tokenizer, m, True) for m in prompts]
        results: list[dict[str, float]] = [{c: math.nan for c in choices} for _ in ids]
        todo = [i for i, p in enumerate(ids) if self._fits(len(p) + 1, 1)]
        direct = token_logprob_kwargs(self._vllm, variants)
        if direct is not None:  # one request per prompt, prefix cache used
            outputs = self._run([ids[i] for i in todo], self._vllm.SamplingParams(**direct))
            for i, out in zip(todo, outputs):
                results[i] = read_choice_logprobs(out.outputs[0].logprobs[0], tok_ids)
            return results
        sp = self._vllm.SamplingParams(**loglik_kwargs())
        outputs = self._run([ids[i] + [t] for i in todo for t in variants], sp)
        for k, i in enumerate(todo):
            step = {}
            for j, t in enumerate(variants):
                out = outputs[k * len(variants) + j]
                step[t] = read_prompt_logprobs(out.prompt_logprobs, ids[i] + [t], len(ids[i]))[0]
            results[i] = read_choice_logprobs(step, tok_ids)
        return results

    def score_classifier(self, inputs: Sequence[str | Messages]) -> list[list[float]]:
        """Raw logits of a sequence classifier (reward model); an input that does not fit gives `[nan]`."""
        self._need("pooling")
        ids = [classifier_token_ids(self.tokenizer, item) for item in inputs]
        results: list[list[float]] = [[math.nan] for _ in ids]
        todo = [i for i, p in enumerate(ids) if self._fits(len(p), 0)]
        self.counts["requests"] += len(todo)
        if todo:
            outputs = self.llm.classify([token_prompt(ids[i]) for i in todo],
                                        pooling_params=raw_pooling_params(self._vllm), use_tqdm=False)
            for i, out in zip(todo, outputs):
                results[i] = [float(x) for x in out.outputs.probs]
        return results


def _config_architectures(kwargs: Mapping[str, Any]) -> list[str]:
    """`architectures` of the checkpoint's config (read with transformers, no weights)."""
    transformers = require("transformers", "hf")
    config = transformers.AutoConfig.from_pretrained(kwargs["model"],
                                                     trust_remote_code=bool(kwargs.get("trust_remote_code")))
    return list(getattr(config, "architectures", None) or [])


def _supported_archs(vllm: Any) -> list[str] | None:
    registry = getattr(vllm, "ModelRegistry", None)
    try:
        return list(registry.get_supported_archs()) if registry is not None else None
    except Exception:  # noqa: BLE001 - an introspection failure must not block a run
        return None
