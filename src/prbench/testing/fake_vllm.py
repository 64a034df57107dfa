"""A stand-in `vllm` module for tests: as strict as real vLLM about keywords, run by transformers.

Why: the vLLM engine must never pass a keyword real vLLM refuses (`LLM(batch_size=...)` is a
TypeError in every vLLM version), and CI has no GPU. This module accepts exactly the field lists
extracted from the real wheels (`prbench/testing/vllm/vllm-<version>.json`, written by
`scripts/refresh_vllm_fields.py`): `LLM(**kw)` takes `LLM.__init__`'s named parameters and
`EngineArgs` fields, `SamplingParams` / `PoolingParams` their struct fields, `LLM.generate` /
`LLM.classify` their parameters. Anything else raises TypeError as vLLM does.

Behaviour mirrors vLLM where prbench depends on it, computed with transformers on the same
checkpoint (tiny models from `prbench.testing.tiny`): token-id prompts (`{"prompt_token_ids": ...}`),
per-request seeds, `stop` strings cut from the text, `prompt_logprobs` (entry 0 is None),
first-step `logprobs` top-k maps of `Logprob` (or exactly `logprob_token_ids`, 0.33), a prefix
cache with `get_metrics` counters (`prompt_logprobs` requests skip reading it, as in vLLM), `classify` with the activation switch, one prompt
longer than `max_model_len` failing the whole call (the batch-wide ValueError prbench must avoid),
and `ModelRegistry` with the registry's architecture tables (reward-model heads are not classifiers).

Use::

    with fake_vllm.installed("0.33.0") as vllm:   # sys.modules["vllm"] for the block
        engine = load_engine(f"vllm:{tiny_dir}")
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

DATA = Path(str(resources.files("prbench.testing").joinpath("vllm")))  # package data: works from a wheel
VERSIONS = ("0.10.1.1", "0.33.0")


def field_lists(version: str, data_dir: Path | None = None) -> dict[str, Any]:
    """The stored field lists of one real vLLM version."""
    path = (data_dir or DATA) / f"vllm-{version}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no stored vLLM field list (run scripts/refresh_vllm_fields.py {version})")
    return json.loads(path.read_text())


@dataclass
class Logprob:
    """vllm.logprobs.Logprob."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, Logprob] | None] | None
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class Counter:
    """vllm.v1.metrics.reader.Counter."""

    name: str
    labels: dict[str, str]
    value: int


@dataclass
class ClassificationOutput:
    probs: list[float]


@dataclass
class ClassificationRequestOutput:
    request_id: str
    outputs: ClassificationOutput
    prompt_token_ids: list[int]
    finished: bool = True


def _checked(kind: str, allowed: Sequence[str], given: dict[str, Any]) -> None:
    for key in given:
        if key not in allowed:
            raise TypeError(f"{kind}.__init__() got an unexpected keyword argument '{key}'")


class StandInModule(types.ModuleType):
    """The stand-in `vllm` module: what `build_module` puts in it, declared (mypy checks its uses)."""

    __version__: str
    FIELDS: dict[str, Any]
    SamplingParams: type
    PoolingParams: type
    EngineArgs: type
    ModelRegistry: Any
    LLM: type
    calls: list[tuple[str, int]]  # (method, n_prompts) of every LLM call, for tests


def build_module(version: str = VERSIONS[-1], data_dir: Path | None = None) -> StandInModule:
    """A fresh `vllm` module object for `version`'s field lists."""
    spec = field_lists(version, data_dir)
    mod = StandInModule("vllm")
    mod.__version__ = version
    mod.__file__ = __file__
    mod.FIELDS = spec
    sampling_defaults = {"n": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                         "max_tokens": 16, "seed": None, "stop": None, "logprobs": None,
                         "prompt_logprobs": None, "repetition_penalty": 1.0, "skip_special_tokens": True}

    class SamplingParams:
        __struct_fields__ = tuple(spec["sampling_params"])
        max_tokens: int | None  # set with the others in __init__ (declared for the check below)

        def __init__(self, **kwargs: Any):
            _checked("SamplingParams", spec["sampling_params"], kwargs)
            for k, v in {**sampling_defaults, **kwargs}.items():
                setattr(self, k, v)
            if self.max_tokens is not None and self.max_tokens < 1:
                raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")

    class PoolingParams:
        __struct_fields__ = tuple(spec["pooling_params"])

        def __init__(self, **kwargs: Any):
            _checked("PoolingParams", spec["pooling_params"], kwargs)
            self.__dict__.update(kwargs)

        def raw(self) -> bool:
            return any(self.__dict__.get(k) is False for k in ("use_activation", "activation", "softmax"))

    # A real dataclass with the real field names: EngineArgs(**kw) refuses what vLLM's refuses.
    EngineArgs = dataclasses.make_dataclass(
        "EngineArgs", [(name, Any, dataclasses.field(default=None)) for name in spec["engine_args"]])

    class _Registry:
        @staticmethod
        def get_supported_archs() -> list[str]:
            return sorted({a for names in spec["architectures"].values() for a in names})

    mod.SamplingParams = SamplingParams
    mod.PoolingParams = PoolingParams
    mod.EngineArgs = EngineArgs
    mod.ModelRegistry = _Registry()
    mod.LLM = _make_llm(spec, EngineArgs)
    mod.calls = []
    return mod


class _StandInLLM:
    """`vllm.LLM` run by transformers; `_make_llm` gives each version's subclass its field lists."""

    spec: ClassVar[dict[str, Any]] = {}
    engine_args: Any = None
    _cache_stats: list[int]  # [prompt tokens queried, hit]: made by the first `_prefix_cache`
    llm_only: ClassVar[set[str]] = set()

    def __init__(self, model: str, **kwargs: Any):
        named = {k: v for k, v in kwargs.items() if k in self.llm_only}
        rest = {k: v for k, v in kwargs.items() if k not in self.llm_only}
        self.engine_args(model=model, **rest)  # TypeError on any keyword EngineArgs lacks, as vLLM
        import torch
        import transformers

        self.kwargs = {"model": model, **named, **rest}
        self.runner = kwargs.get("runner", "auto")
        trust = bool(kwargs.get("trust_remote_code", False))
        config = transformers.AutoConfig.from_pretrained(model, trust_remote_code=trust)
        archs = list(getattr(config, "architectures", None) or [])
        limit = int(getattr(config, "max_position_embeddings", 0) or 2048)
        max_len = kwargs.get("max_model_len")
        if max_len is not None and int(max_len) > limit:
            raise ValueError(f"User-specified max_model_len ({max_len}) is greater than the derived "
                             f"max_model_len (max_position_embeddings={limit} in model's config.json).")
        self.llm_engine = types.SimpleNamespace(
            model_config=types.SimpleNamespace(max_model_len=int(max_len or limit), architectures=archs))
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(model, trust_remote_code=trust)
        self._torch = torch
        if self.runner == "pooling":
            reward = [a for a in archs if "RewardModel" in a]
            if reward:
                raise ValueError(f"{reward[0]} is a reward model (token rewards), not a classifier")
            cls: type[transformers.AutoModelForSequenceClassification | transformers.AutoModelForCausalLM] = \
                transformers.AutoModelForSequenceClassification
        else:
            cls = transformers.AutoModelForCausalLM
        self.model = cls.from_pretrained(model, trust_remote_code=trust, dtype=torch.float32).eval()

    def get_metrics(self) -> list[Counter]:
        """vLLM 0.33 `LLM.get_metrics` (v1/metrics/reader.py Counters): prefix-cache queries and hits
        in prompt tokens, counted only with `disable_log_stats=False` (offline LLM's default is True)."""
        if self.kwargs.get("disable_log_stats", True):
            return []
        return [Counter("vllm:prefix_cache_queries", {}, self._cache_stats[0]),
                Counter("vllm:prefix_cache_hits", {}, self._cache_stats[1])]

    def _prefix_cache(self, prompts: list[list[int]], sps: list[Any]) -> None:
        """Full 16-token blocks, cached after the call that computed them (requests scheduled
        together do not hit each other); a request with prompt log-probs skips reading the
        cache (vLLM 0.33 sampling_params.py, `skip_reading_prefix_cache`)."""
        cache = self.__dict__.setdefault("_blocks", set())
        stats = self.__dict__.setdefault("_cache_stats", [0, 0])
        new = set()
        for ids, sp in zip(prompts, sps):
            stats[0] += len(ids)
            blocks = [tuple(ids[: b + 16]) for b in range(0, len(ids) - 15, 16)]
            if getattr(sp, "prompt_logprobs", None) is None and self.kwargs.get("enable_prefix_caching", True):
                stats[1] += 16 * next((n for n, b in enumerate(blocks) if b not in cache), len(blocks))
            new.update(blocks)
        cache |= new

    def get_tokenizer(self, **kwargs: Any) -> Any:
        _checked("LLM.get_tokenizer", self.spec["llm_methods"]["get_tokenizer"], kwargs)
        return self._tokenizer

    def _ids(self, prompts: Any) -> list[list[int]]:
        items = prompts if isinstance(prompts, list) else [prompts]
        out = []
        for p in items:
            if not isinstance(p, dict) or "prompt_token_ids" not in p:
                raise TypeError(f"the stand-in takes TokensPrompt dicts only, got {type(p).__name__}")
            ids = [int(i) for i in p["prompt_token_ids"]]
            max_len = self.llm_engine.model_config.max_model_len
            if len(ids) > max_len:  # vLLM validates every prompt first: one bad prompt fails the call
                raise ValueError(f"The decoder prompt (length {len(ids)}) is longer than the maximum "
                                 f"model length of {max_len}. Make sure that `max_model_len` is no "
                                 f"smaller than the number of text tokens.")
            out.append(ids)
        return out

    def generate(self, prompts: Any, sampling_params: Any = None, **kwargs: Any) -> list[RequestOutput]:
        _checked("LLM.generate", self.spec["llm_methods"]["generate"], kwargs)
        if self.runner == "pooling":
            raise ValueError("LLM.generate() is only supported for generative models")
        ids = self._ids(prompts)
        sps = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(ids)
        if len(sps) != len(ids):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        mod = sys.modules.get("vllm")
        if mod is not None and hasattr(mod, "calls"):
            mod.calls.append(("generate", len(ids)))
        self._prefix_cache(ids, sps)
        return [self._one(i, p, sp) for i, (p, sp) in enumerate(zip(ids, sps))]

    def _logits(self, ids: list[int]) -> Any:
        torch = self._torch
        with torch.no_grad():
            return self.model(input_ids=torch.tensor([ids])).logits[0].float()

    def _one(self, n: int, prompt: list[int], sp: Any) -> RequestOutput:
        torch = self._torch
        max_len = self.llm_engine.model_config.max_model_len
        plp: list[dict[int, Logprob] | None] | None = None
        if sp.prompt_logprobs is not None:
            lsm = torch.log_softmax(self._logits(prompt), -1)
            plp = [None]
            for pos in range(1, len(prompt)):
                row = lsm[pos - 1]
                tok = prompt[pos]
                entry = {tok: Logprob(float(row[tok]), int((row > row[tok]).sum()) + 1)}
                for j in torch.topk(row, max(1, int(sp.prompt_logprobs))).indices.tolist():
                    entry.setdefault(j, Logprob(float(row[j]), int((row > row[j]).sum()) + 1))
                plp.append(entry)
        gen = torch.Generator().manual_seed(int(sp.seed) if sp.seed is not None else 0)
        seq = list(prompt)
        out_ids: list[int] = []
        step_lps: list[dict[int, Logprob]] = []
        finish = "length"
        text = ""
        eos = self._tokenizer.eos_token_id
        limit = min(int(sp.max_tokens), max_len - len(prompt))
        while len(out_ids) < limit:
            logits = self._logits(seq)[-1]
            if sp.repetition_penalty != 1.0:
                for t in set(seq):
                    logits[t] = logits[t] / sp.repetition_penalty if logits[t] > 0 else logits[t] * sp.repetition_penalty
            lsm = torch.log_softmax(logits, -1)
            if sp.temperature == 0:
                tok = int(torch.argmax(logits))
            else:
                probs = torch.softmax(logits / sp.temperature, -1)
                if sp.top_k and sp.top_k > 0:
                    kth = torch.topk(probs, min(int(sp.top_k), probs.numel())).values[-1]
                    probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
                if sp.top_p < 1.0:
                    srt, idx = torch.sort(probs, descending=True)
                    keep = torch.cumsum(srt, 0) - srt < sp.top_p * srt.sum()
                    mask = torch.zeros_like(probs, dtype=torch.bool)
                    mask[idx[keep]] = True
                    probs = torch.where(mask, probs, torch.zeros_like(probs))
                tok = int(torch.multinomial(probs / probs.sum(), 1, generator=gen))
            wanted = getattr(sp, "logprob_token_ids", None)  # 0.33: exactly these ids (+ the sampled one)
            if sp.logprobs is not None or wanted:
                entry = {tok: Logprob(float(lsm[tok]))}
                top = list(wanted) if wanted else torch.topk(lsm, int(sp.logprobs)).indices.tolist()
                for r, j in enumerate(top, start=1):
                    entry[j] = Logprob(float(lsm[j]), None if wanted else r)
                step_lps.append(entry)
            if tok == eos:
                finish = "stop"
                break
            out_ids.append(tok)
            seq.append(tok)
            decoded = self._tokenizer.decode(out_ids, skip_special_tokens=sp.skip_special_tokens)
            if not isinstance(decoded, str):
                raise TypeError(f"tokenizer.decode of one sequence gave a {type(decoded).__name__}")
            text = decoded
            cut = min((i for i in (text.find(s) for s in (sp.stop or []) if s) if i >= 0), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
                break
        keep = sp.logprobs is not None or getattr(sp, "logprob_token_ids", None)
        comp = CompletionOutput(0, text, out_ids, None, step_lps if keep else None, finish)
        return RequestOutput(str(n), None, prompt, plp, [comp])

    def classify(self, prompts: Any, **kwargs: Any) -> list[ClassificationRequestOutput]:
        _checked("LLM.classify", self.spec["llm_methods"]["classify"], kwargs)
        if self.runner != "pooling":
            raise ValueError("LLM.classify() is only supported for pooling models (runner='pooling')")
        params = kwargs.get("pooling_params")
        raw = params is not None and params.raw()
        mod = sys.modules.get("vllm")
        ids = self._ids(prompts)
        if mod is not None and hasattr(mod, "calls"):
            mod.calls.append(("classify", len(ids)))
        torch = self._torch
        out = []
        for n, seq in enumerate(ids):
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([seq])).logits[0].float()
            vals = logits if raw else (torch.sigmoid(logits) if logits.numel() == 1 else torch.softmax(logits, -1))
            out.append(ClassificationRequestOutput(str(n), ClassificationOutput([float(v) for v in vals]), seq))
        return out



def _make_llm(spec: dict[str, Any], engine_args: type) -> type:
    """The stand-in `LLM` class of one vLLM version: its signature names exactly that version's keywords."""
    llm_only = set(spec["llm_init"]) - set(spec["engine_args"])

    def __init__(self: Any, model: str, **kwargs: Any) -> None:
        _StandInLLM.__init__(self, model, **kwargs)

    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # inspect reads it; typeshed lacks it
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in sorted(llm_only)]
        + [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    return type("LLM", (_StandInLLM,), {"spec": spec, "engine_args": engine_args, "llm_only": llm_only,
                                        "__init__": __init__})


@contextlib.contextmanager
def installed(version: str = VERSIONS[-1], data_dir: Path | None = None) -> Iterator[StandInModule]:
    """`sys.modules["vllm"]` is the stand-in for the block (the previous entry is restored)."""
    mod = build_module(version, data_dir)
    had, before = "vllm" in sys.modules, sys.modules.get("vllm")  # an entry may be None: an import blocked
    sys.modules["vllm"] = mod
    try:
        yield mod
    finally:
        sys.modules.pop("vllm", None)
        if had:
            sys.modules.update(vllm=before)  # type: ignore[arg-type]  # None is how sys.modules blocks an import
