"""Local Hugging Face models (CPU or GPU): chat generation, teacher-forced log-likelihood, answer-token scores.

Correctness rules this engine keeps (each one is tested):

- **One tokenization step, no double BOS.** A chat is tokenized with
  `apply_chat_template(..., tokenize=True)`; special tokens are never added again on top of
  what the template writes. Models without a chat template get the documented plain format
  (`PLAIN_FORMAT`), tokenized once with the tokenizer's own special-token rule.
- **Batching never changes a result.** Greedy decoding, log-likelihoods and choice scores are
  computed with left padding, an attention mask and explicit position ids, so a request gives
  the same answer alone or in any batch (float tolerance ~1e-5 in float32).
- **Sampling is seeded per request.** Each sampled request draws from its own CPU
  `torch.Generator(seed)`, one draw per step, inside a logits processor (`_RowDecoder`); so
  a request's sample does not depend on which other requests share its batch, and sampled
  requests still batch (important for Best-of-N). Repetition penalty is applied per row over
  that row's own prompt + generated tokens (never over padding).
- **Truncation is counted.** With `max_length` set, over-long prompts lose tokens from the left;
  each case is logged, counted in `self.stats` and flagged in `Generation.meta["truncated"]`.

dtype "auto": bfloat16 on CUDA GPUs that support it, float16 on older CUDA GPUs, float32 on
CPU and MPS (CPU bfloat16 matmuls are slow and lossy, and tests compare to 1e-4).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import math
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.engines.prefix import (
    SharedGroups,
    cache_kwarg,
    group_by_prefix,
    output_cache,
    run_shared,
    supports_sharing,
)
from prbench.errors import PrbenchError, SpecError
from prbench.fingerprint import local_digest
from prbench.runtime.extras import require
from prbench.runtime.progress import beat, step
from prbench.specs import KindOptions, model_or_builtin

log = logging.getLogger(__name__)

PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}
PLAIN_FORMAT = (
    "Plain chat format for models without a chat template: one line per message, "
    "'System: ...\\n', 'User: ...\\n', 'Assistant: ...\\n', then 'Assistant: ' as the generation prompt; "
    "tokenized once with the tokenizer's default special tokens (e.g. its BOS)."
)


# ---------------------------------------------------------------------------------------------
# Tokenization helpers (torch-free; shared with the vLLM engine)
# ---------------------------------------------------------------------------------------------


def render_plain(messages: Messages, add_generation_prompt: bool = True) -> str:
    """The plain format (see `PLAIN_FORMAT`): 'User: ...\\nAssistant: '."""
    parts = [f"{PLAIN_ROLES.get(m['role'], m['role'].capitalize())}: {m['content']}\n" for m in messages]
    if add_generation_prompt:
        parts.append("Assistant: ")
    return "".join(parts)


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True) -> tuple[str, bool]:
    """The rendered prompt text and whether tokenizing it must add the tokenizer's special tokens.

    With a chat template the template writes every special token itself (False); the plain
    format relies on the tokenizer's own rule, e.g. a leading BOS (True).
    """
    if has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tokenize=False
        )
        return str(text), False
    return render_plain(messages, add_generation_prompt), True


def chat_ids(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a chat, in one step (never re-adding special tokens the template wrote)."""
    if has_chat_template(tokenizer):
        out = tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True
        )
        ids = out["input_ids"]
        if ids and isinstance(ids[0], list):  # some tokenizers return a batch of one
            ids = ids[0]
        return [int(i) for i in ids]
    return list(
        tokenizer(render_plain(messages, add_generation_prompt), add_special_tokens=True)["input_ids"]
    )


def split_continuation(
    tokenizer: Any, messages: Messages, continuation: str
) -> tuple[list[int], list[int], bool]:
    """(prompt ids, continuation ids, prefix_ok) for scoring `continuation` as the assistant's reply.

    The prompt is the chat with its generation prompt. The continuation is tokenized *in context*
    (prompt text + continuation as one string) and the prompt ids are checked to be a prefix of
    that; when a merge crosses the boundary (prefix_ok False) the continuation is tokenized on
    its own and appended, so the prompt tokens stay exactly what generation would see.
    """
    prompt = chat_ids(tokenizer, messages, True)
    if not continuation:
        return prompt, [], True
    text, add_special = chat_text(tokenizer, messages, True)
    full = list(tokenizer(text + continuation, add_special_tokens=add_special)["input_ids"])
    if len(full) > len(prompt) and full[: len(prompt)] == prompt:
        return prompt, full[len(prompt) :], True
    return prompt, list(tokenizer(continuation, add_special_tokens=False)["input_ids"]), False


def choice_token_ids(tokenizer: Any, choice: str) -> list[int]:
    """Single-token spellings of `choice`: the bare string and its leading-space variant.

    Their probabilities are later folded with logsumexp (the probability that the reply
    *starts with* the choice in either spelling). Raises when neither is a single token.
    """
    ids: list[int] = []
    for variant in (choice, " " + choice):
        enc = tokenizer(variant, add_special_tokens=False)["input_ids"]
        if len(enc) == 1 and int(enc[0]) not in ids:
            ids.append(int(enc[0]))
    if not ids:
        raise PrbenchError(f"choice {choice!r} is not a single token for this tokenizer; use loglik instead")
    return ids


def apply_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Cut `text` at the earliest occurrence of any stop string; (text, whether one was found)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """Silence transformers' progress bars (weight loading, shard writing) for the block.

    Why: a library call must not write tqdm bars to stderr; CLIs that print JSON and logs of
    long runs get polluted otherwise. The previous setting is restored afterwards.
    """
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def resolve_device(device: str) -> str:
    """`auto` / `cuda` -> this rank's GPU under a launcher (`prbench.runtime.ranks.cuda_device`), read at load time."""
    from prbench.runtime.ranks import cuda_device

    torch = require("torch", "hf")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return cuda_device()
    if device != "auto":
        return device
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(dtype: Any, device: str) -> Any:
    """'auto': bfloat16 on CUDA with bf16 support, float16 on older CUDA, else float32."""
    torch = require("torch", "hf")
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise SpecError(f"unknown dtype {dtype!r} (auto, float32, bfloat16, float16)")
    return value


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: Any) -> tuple[Any, Any, Any]:
    """Left-padded ids, attention mask and position ids (0.. over each row's real tokens); shared
    with the reward-guided decoding loop."""
    torch = require("torch", "hf")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


class TransformersOptions(KindOptions):
    """Options of the local transformers engine (`hf:` and `builtin:` engines)."""

    device: str = "auto"
    dtype: Any = "auto"
    trust_remote_code: bool = False
    batch_size: int = 8
    max_length: int | None = None
    gguf_file: str | None = None
    revision: str | None = None
    default_params: Any = None  # a GenParams
    identity: dict[str, Any] | None = None
    share_prefix: bool = True


class TransformersEngine(Engine):
    """A Hugging Face causal LM run locally. `model` and `tokenizer` are public for direct use.

    `model`: hub id or local folder (`gguf_file` names a GGUF file inside it). `device`:
    "auto" (cuda, else mps, else cpu) or any torch device string. `max_length`: total token
    budget (prompt + new tokens); None means no truncation. `default_params`: used when
    `generate` gets no params (builtin SmolLM2 sets repetition_penalty=1.3). `identity`:
    replaces path-based fields in `fingerprint()` (builtins use a stable name + source hash).
    Calls are serialised by a lock; `stats` counts truncations and prefix mismatches.
    """

    options_model = TransformersOptions
    resolve_spec = staticmethod(model_or_builtin)

    def __init__(
        self,
        model: str,
        device: str = "auto",
        dtype: Any = "auto",
        trust_remote_code: bool = False,
        batch_size: int = 8,
        max_length: int | None = None,
        gguf_file: str | None = None,
        revision: str | None = None,
        default_params: GenParams | None = None,
        identity: dict[str, Any] | None = None,
        share_prefix: bool = True,
    ):
        require("torch", "hf")
        transformers = require("transformers", "hf")
        self.spec = f"hf:{model}"
        self.model_id = model
        local = Path(model).expanduser()
        self.local_dir: Path | None = local if local.is_dir() else None
        if self.local_dir is None:
            from prbench.runtime.hub import check_ref

            check_ref(model, "hf")  # a missing folder or an unreachable hub: one line, no retry loop
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.batch_size = max(1, int(batch_size))
        self.max_length = max_length
        self.gguf_file = gguf_file
        self.revision = revision
        self.default_params = default_params or GenParams()
        self._identity = identity
        self.stats: dict[str, int] = {
            "truncated_prompts": 0,
            "truncated_continuations": 0,
            "prefix_mismatch": 0,
        }

        load_kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if revision:
            load_kw["revision"] = revision
        if gguf_file:
            load_kw["gguf_file"] = gguf_file
        source = str(self.local_dir) if self.local_dir else model
        try:
            with step(f"loading {model}"), quiet_progress():  # the detail ends with the load
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, **load_kw)
                self.model = transformers.AutoModelForCausalLM.from_pretrained(
                    source, dtype=self.dtype, **load_kw
                )
        except OSError as exc:
            raise PrbenchError(f"cannot load model {model!r}: {exc}") from None
        self.model.to(self.device)
        self.model.eval()

        tok = self.tokenizer
        if tok.pad_token is None and tok.eos_token is not None:
            tok.pad_token = tok.eos_token  # documented fallback: pad = eos (padding is always masked)
        self.pad_id: int = int(tok.pad_token_id) if tok.pad_token_id is not None else 0
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.pad_id
        self.eos_ids: list[int] = self._eos_ids()
        # One call at a time: generate() briefly swaps model.generation_config, and concurrent
        # forward passes on one model only fight over the same cores or GPU anyway.
        self._lock = threading.RLock()
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._accepts_position_ids = "position_ids" in inspect.signature(self.model.forward).parameters
        self.share_prefix = share_prefix and self._accepts_position_ids and supports_sharing(self.model)

    # -- identity --------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"TransformersEngine({self.model_id!r}, device={self.device!r}, dtype={self.dtype})"

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (self.tokenizer.eos_token_id, gen_eos):
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if v is not None and int(v) not in ids:
                    ids.append(int(v))
        return ids

    def chat_template_hash(self) -> str:
        template = getattr(self.tokenizer, "chat_template", None)
        text = template if isinstance(template, str) and template else "plain:" + PLAIN_FORMAT
        if isinstance(template, dict):  # multiple named templates
            text = repr(sorted(template.items()))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def fingerprint(self) -> dict[str, Any]:
        """Model identity (id or path + content digest of its files), revision, chat-template hash, dtype."""
        fp: dict[str, Any] = {
            "engine": "transformers",
            "model": self.model_id,
            "revision": self.revision or getattr(self.model.config, "_commit_hash", None),
            "chat_template_sha256": self.chat_template_hash(),
            "dtype": str(self.dtype).replace("torch.", ""),
        }
        if self.gguf_file:
            fp["gguf_file"] = self.gguf_file
        if self.local_dir is not None:
            fp["model"] = str(self.local_dir.resolve())
            fp["weights"] = local_digest(self.local_dir)  # full content digest, memoized per file
        if self._identity:
            fp.update(self._identity)
        return fp

    # -- tokenization ----------------------------------------------------------------------

    def encode_chat(self, messages: Messages, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat (template applied and tokenized in one step; no double BOS)."""
        return chat_ids(self.tokenizer, messages, add_generation_prompt)

    def _left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[Any, Any, Any]:
        return left_pad(seqs, self.pad_id, self.device)

    def _forward_last(self, seqs: Sequence[Sequence[int]], keep: int) -> Any:
        """Float32 logits of the last `keep` positions of each left-padded row: [B, keep, V]."""
        torch = require("torch", "hf")
        beat(lambda: f"scoring a batch of {len(seqs)} sequences")
        ids, mask, pos = self._left_pad(seqs)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
        if self._accepts_position_ids:
            kwargs["position_ids"] = pos
        if self._accepts_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        with torch.inference_mode():
            logits = self.model(**kwargs).logits
        return logits[:, -keep:, :].float()

    def _param_list(self, params: GenParams | Sequence[GenParams] | None, n: int) -> list[GenParams]:
        if params is None:
            params = self.default_params
        if isinstance(params, GenParams):
            return [params] * n
        plist = list(params)
        if len(plist) != n:
            raise SpecError(f"got {len(plist)} GenParams for {n} prompts")
        return plist

    def _order(self, lengths: Sequence[int]) -> list[list[int]]:
        """Batches of indices, longest first (similar lengths together; OOM shows up early)."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    # -- generation ------------------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams] | None = None
    ) -> list[Generation]:
        """Batched chat generation; greedy and sampled requests may share a batch (see module doc)."""
        with self._lock:
            return self._generate(prompts, params)

    def _generate(
        self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams] | None
    ) -> list[Generation]:
        plist = self._param_list(params, len(prompts))
        encoded: list[list[int]] = []
        truncated: list[bool] = []
        for messages, p in zip(prompts, plist):
            ids = self.encode_chat(messages, True)
            cut = False
            if self.max_length is not None and len(ids) + p.max_new_tokens > self.max_length:
                keep = max(1, self.max_length - p.max_new_tokens)
                if len(ids) > keep:
                    ids, cut = ids[-keep:], True
                    self.stats["truncated_prompts"] += 1
                    log.warning(
                        "prompt truncated from the left to %d tokens (max_length=%d)", keep, self.max_length
                    )
            encoded.append(ids)
            truncated.append(cut)
        results: list[Generation | None] = [None] * len(prompts)
        batches = self._order([len(e) for e in encoded])
        for b, batch in enumerate(batches):
            where = f"generating {len(prompts)} answers, batch {b + 1}/{len(batches)}"
            gens = self._generate_batch([encoded[i] for i in batch], [plist[i] for i in batch], where)
            for i, g in zip(batch, gens):
                if truncated[i]:
                    g.meta["truncated"] = True
                results[i] = g
        return [g for g in results if g is not None]

    def _generate_batch(self, seqs: list[list[int]], plist: list[GenParams], where: str = "generating") -> list[Generation]:
        torch = require("torch", "hf")
        transformers = require("transformers", "hf")
        max_new = max(p.max_new_tokens for p in plist)
        if max_new <= 0:
            return [Generation(text="", finish_reason="length", n_tokens=0) for _ in seqs]
        ids, mask, _ = self._left_pad(seqs)
        width = ids.shape[1]
        decoder = _RowDecoder(self, plist, [width - len(s) for s in seqs], width, where)
        config = transformers.GenerationConfig(
            max_new_tokens=max_new,
            do_sample=False,
            num_beams=1,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids or None,
        )
        # generate() fills every unset field of `config` from model.generation_config (e.g. a
        # checkpoint's own repetition_penalty or top_k): swap in a neutral one for the call, so
        # that only GenParams decide the decoding.
        saved = self.model.generation_config
        self.model.generation_config = transformers.GenerationConfig(
            bos_token_id=getattr(saved, "bos_token_id", None),
            eos_token_id=self.eos_ids or None,
            pad_token_id=self.pad_id,
        )
        try:
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    generation_config=config,
                    logits_processor=transformers.LogitsProcessorList([decoder]),
                )
        finally:
            self.model.generation_config = saved
        gens: list[Generation] = []
        for row, p in zip(out[:, width:].tolist(), plist):
            row = row[: p.max_new_tokens]
            finish = "length"
            for j, t in enumerate(row):
                if t in self.eos_ids:
                    row, finish = row[:j], "stop"
                    break
            text = self.tokenizer.decode(row, skip_special_tokens=True)
            text, stopped = apply_stop(text, p.stop)
            if stopped:
                finish = "stop"
            gens.append(Generation(text=text, finish_reason=finish, n_tokens=len(row)))
        return gens

    # -- scoring ---------------------------------------------------------------------------

    def loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        """Per-token log-probs of each continuation given its chat (teacher forcing, batched)."""
        with self._lock:
            return self._loglik(requests)

    def _loglik(self, requests: Sequence[tuple[Messages, str]]) -> list[list[float]]:
        torch = require("torch", "hf")
        items: list[tuple[list[int], list[int]]] = []
        for messages, continuation in requests:
            prompt, cont, ok = split_continuation(self.tokenizer, messages, continuation)
            if not ok:
                self.stats["prefix_mismatch"] += 1
                log.debug("continuation tokenized apart from its prompt (a merge crossed the boundary)")
            prompt, cont = self._fit(prompt, cont)
            items.append((prompt, cont))
        results: list[list[float]] = [[] for _ in items]
        todo = [i for i, (_, c) in enumerate(items) if c]
        if self.share_prefix:  # continuations of one prompt continue from its KV cache
            groups = group_by_prefix([items[i][0] + items[i][1] for i in todo], [tuple(items[i][0]) for i in todo],
                                     limits=[len(items[i][0]) - 1 for i in todo])
            for j, lp in self._loglik_shared(groups, [len(items[i][1]) for i in todo]).items():
                results[todo[j]] = lp
            todo = [todo[j] for j in groups.rest]
        for batch in self._order([len(items[i][0]) + len(items[i][1]) for i in todo]):
            batch = [todo[i] for i in batch]
            keep = max(len(items[i][1]) for i in batch) + 1
            seqs = [items[i][0] + items[i][1] for i in batch]
            logits = self._forward_last(seqs, keep)  # positions predicting the last keep-1 tokens
            logprobs = torch.log_softmax(logits[:, :-1, :], dim=-1)
            targets, _, _ = self._left_pad(seqs)
            targets = targets[:, -(keep - 1) :]
            picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).cpu()
            for row, i in enumerate(batch):
                n = len(items[i][1])
                results[i] = picked[row, picked.shape[1] - n :].tolist()
        return results

    def _loglik_shared(self, groups: SharedGroups, cont_len: Sequence[int]) -> dict[int, list[float]]:
        """Continuation log-probs for grouped sequences, each shared prompt prefix run once."""
        torch = require("torch", "hf")
        kwarg = cache_kwarg(self.model)

        def prefill(ids: Any, mask: Any) -> Any:
            return output_cache(self.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1))

        def extend(ids: Any, mask: Any, pos: Any, cache: Any, seqs: list[int]) -> list[list[float]]:
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                                **{kwarg: cache}).logits
            out = []
            for row, j in enumerate(seqs):
                n = cont_len[j]
                end = int(mask[row, -ids.shape[1]:].sum())  # suffix length: prompt tail + continuation
                lp = torch.log_softmax(logits[row, end - n - 1 : end - 1].float(), dim=-1)
                out.append(lp.gather(-1, ids[row, end - n : end].unsqueeze(-1)).squeeze(-1).cpu().tolist())
            return out

        with torch.inference_mode():
            return run_shared(groups, prefill, extend, torch=torch, pad_id=self.pad_id, device=self.device,
                              token_budget=self.batch_size * (self.max_length or 4096), max_rows=self.batch_size, counts=self.stats)

    def _fit(self, prompt: list[int], cont: list[int]) -> tuple[list[int], list[int]]:
        """Apply max_length to a (prompt, continuation) pair: prompt loses its left end first."""
        if self.max_length is None or len(prompt) + len(cont) <= self.max_length:
            return prompt, cont
        if len(cont) >= self.max_length:
            self.stats["truncated_continuations"] += 1
            log.warning("continuation of %d tokens cut to %d (max_length)", len(cont), self.max_length - 1)
            cont = cont[: self.max_length - 1]
        keep = self.max_length - len(cont)
        if len(prompt) > keep:
            self.stats["truncated_prompts"] += 1
            log.warning("prompt truncated from the left to %d tokens (max_length=%d)", keep, self.max_length)
            prompt = prompt[-keep:]
        return prompt, cont

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        """Log-prob that the reply's first token is each choice; 'A' and ' A' folded by logsumexp."""
        with self._lock:
            return self._choice_logprobs(prompts, choices)

    def _choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[dict[str, float]]:
        torch = require("torch", "hf")
        token_ids = {c: choice_token_ids(self.tokenizer, c) for c in choices}
        encoded = [self.encode_chat(m, True) for m in prompts]
        if self.max_length is not None:
            encoded = [self._fit(e, [])[0] for e in encoded]
        results: list[dict[str, float]] = [{} for _ in encoded]
        for batch in self._order([len(e) for e in encoded]):
            logits = self._forward_last([encoded[i] for i in batch], 1)[:, -1, :]
            logprobs = torch.log_softmax(logits, dim=-1).cpu()
            for row, i in enumerate(batch):
                results[i] = {
                    c: float(torch.logsumexp(logprobs[row, ids], dim=0)) for c, ids in token_ids.items()
                }
        return results


class _RowDecoder:
    """A logits processor that makes each row of a batch behave as if it ran alone.

    Per row and step: repetition penalty over the row's own tokens (not padding), then either
    greedy (scores left for HF's argmax) or a sample drawn with the row's own seeded CPU
    generator (scores become one-hot so HF's argmax picks it). Rows past their own
    `max_new_tokens` or whose text already contains a stop string are forced to EOS so the
    batch can finish early; the engine trims those tokens afterwards.
    """

    def __init__(self, engine: TransformersEngine, plist: list[GenParams], pads: list[int], width: int,
                 where: str = "generating"):
        torch = require("torch", "hf")
        self.engine = engine
        self.where = where  # what a progress beat says (called every token step: a log line every 10 s)
        self.max_new = max(p.max_new_tokens for p in plist)
        self.plist = plist
        self.pads = pads
        self.width = width
        self.generators = [
            torch.Generator(device="cpu").manual_seed(int(p.seed)) if p.temperature > 0 else None
            for p in plist
        ]
        self.force_id = engine.eos_ids[0] if engine.eos_ids else None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = require("torch", "hf")
        step = input_ids.shape[1] - self.width
        beat(lambda: f"{self.where}, token {step}/{self.max_new}")
        neg_inf = torch.finfo(scores.dtype).min
        for i, p in enumerate(self.plist):
            if self.force_id is not None and (step >= p.max_new_tokens or self._hit_stop(input_ids[i], p)):
                scores[i].fill_(neg_inf)
                scores[i, self.force_id] = 0.0
                continue
            if p.repetition_penalty != 1.0:
                seen = torch.unique(input_ids[i, self.pads[i] :])
                vals = scores[i, seen]
                scores[i, seen] = torch.where(
                    vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty
                )
            gen = self.generators[i]
            if gen is not None:
                token = self._sample(scores[i], p, gen)
                scores[i].fill_(neg_inf)
                scores[i, token] = 0.0
        return scores

    def _hit_stop(self, row: Any, p: GenParams) -> bool:
        if not p.stop or row.shape[0] <= self.width:
            return False
        text = self.engine.tokenizer.decode(row[self.width :].tolist(), skip_special_tokens=True)
        return any(s and s in text for s in p.stop)

    @staticmethod
    def _sample(logits: Any, p: GenParams, gen: Any) -> int:
        """Temperature, top-k, top-p, then inverse-CDF with one uniform from the row's generator."""
        torch = require("torch", "hf")
        logits = logits.double() / p.temperature
        if p.top_k is not None and 0 < p.top_k < logits.shape[-1]:
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, -math.inf)
        probs = torch.softmax(logits, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, idx = torch.sort(probs, descending=True)
            before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each token
            drop = idx[before >= p.top_p]
            probs[drop] = 0.0
        cdf = torch.cumsum(probs, dim=-1)
        u = float(torch.rand((), generator=gen, dtype=torch.float64)) * float(cdf[-1])
        token = int(
            torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype, device=cdf.device), right=True)
        )
        return min(token, probs.shape[-1] - 1)
