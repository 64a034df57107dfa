"""Sequence-classifier reward models (`hf:<hub id | dir>`, `bt:<dir>`), scored correctly.

- The chat template is applied and tokenized in ONE step, so BOS is never added twice.
  Models without a chat template get the plain format "User: ...\\n\\nAssistant: ..." with
  the tokenizer's own special tokens.
- Scores are read at the last real token (never by searching for the pad token, which may equal EOS).
- Batch-invariant, byte for byte: a sequence's score depends on its own tokens only, never on
  which sequences share its call or batch (`prbench.engines.buckets`: each part is padded to a
  width fixed by its own length, and only parts of one width share a batch; on a CPU every
  matmul takes a fixed number of rows, `prbench.engines.fixed_gemm`). A decoder RM runs every
  sequence whose prompt has 8+ tokens as its prompt (everything before the response, read from
  the sequence itself) plus the response continued from the prompt's KV cache, whether or not
  another response to that prompt came in the same call; responses to different prompts share
  a batch when their prompts' caches have one (coarse) width.
- One logit -> that logit; two -> logit[1] - logit[0] (log-odds of the positive class);
  more -> the `label_index` the user names (else an error).
- Shared-prefix scoring: responses to the same prompt (chosen and rejected; N Best-of-N
  samples) share that prompt, which then runs once per call (equal to full scoring within
  float tolerance, tested); under `profile` the prompt is most of the tokens.
- Over `max_length`: least relevant profile posts are dropped first (counted per response as
  `truncated`); the response is never cut. If even the bare question does not fit, the
  score is invalid (counted), never silently truncated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from prbench.context.conditions import View
from prbench.engines.buckets import ROW_TILE, Batch, bucketed_batches, kv_width, pads_rows
from prbench.engines.fixed_gemm import GEMM_RULE, fix_gemm_rows, sequence_windows
from prbench.engines.prefix import (
    MIN_SHARED_PREFIX,
    PromptCaches,
    cache_kwarg,
    output_cache,
    supports_sharing,
)
from prbench.fingerprint import local_digest
from prbench.rewards.base import PointwiseRM, Score
from prbench.runtime.extras import require
from prbench.runtime.progress import beat
from prbench.specs import Kind, RMOptions, model_or_builtin
from prbench.store.cache import text_hash

CACHE_BYTES = 1 << 30  # prompt KV caches held at once (responses batch across them): 64 profile prompts of a 135M model
PLAIN_FORMAT = "User: {prompt}\n\nAssistant: {response}"
PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}  # earlier turns, same plain form


def resolve_device(device: str = "auto") -> str:
    """`auto` / `cuda` -> this rank's GPU (`prbench.runtime.ranks.cuda_device`), read at load time; else as given."""
    from prbench.runtime.ranks import cuda_device

    torch = require("torch", "hf")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return cuda_device()
    return "cpu" if device == "auto" else device


def resolve_dtype(dtype: str, device: str) -> Any:
    """'auto' -> bfloat16 on a GPU that supports it, float32 on CPU (CPU bf16 is slow and lossy)."""
    torch = require("torch", "hf")
    if dtype != "auto":
        return getattr(torch, dtype)
    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


class SequenceClassifierRM(PointwiseRM):
    """A reward model with a classification head, as most open scalar RMs are."""

    def __init__(
        self,
        model: str,
        *,
        spec: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        max_length: int | None = None,
        batch_size: int = 8,
        token_budget: int | None = None,
        trust_remote_code: bool = False,
        label_index: int | None = None,
        share_prefix: bool = True,
        **_: Any,
    ):
        transformers = require("transformers", "hf")
        self.torch = require("torch", "hf")
        self.spec = spec or f"hf:{model}"
        self.model_id = model
        if model.startswith("builtin:"):  # e.g. hf:builtin:smollm2-135m-instruct (random head: speed tests)
            from prbench.engines.builtin import builtin_path

            model = str(builtin_path(model.split(":", 1)[1]))
        self.device = resolve_device(device)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
            model, trust_remote_code=trust_remote_code, dtype=resolve_dtype(dtype, self.device)
        ).to(self.device).eval()
        self.gemm_rows = None if pads_rows(self.device) else GEMM_RULE  # CPU: fixed-shape matmuls (engines.fixed_gemm)
        if self.gemm_rows:
            fix_gemm_rows(self.model)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        limit = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_length = min(max_length or limit, limit)
        self.batch_size = batch_size
        self.token_budget = token_budget or batch_size * self.max_length
        self.label_index = label_index
        self.has_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.share_prefix = share_prefix and self._split_model() is not None and supports_sharing(self.model)
        self.counts = {"scored": 0, "truncated": 0, "too_long": 0, "tokens": 0, "padded_tokens": 0,
                       "prefix_tokens_saved": 0}

    # -- identity -------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        template = self.tokenizer.chat_template if self.has_template else PLAIN_FORMAT
        return {
            "spec": self.spec,
            "revision": getattr(self.model.config, "_commit_hash", None),
            "template": text_hash(str(template)),
            "dtype": str(self.model.dtype),
            "max_length": self.max_length,
            "label_index": self.label_index,
            "weights": local_digest(getattr(self.model, "name_or_path", None)),  # local folder: its content
            "gemm_rows": self.gemm_rows,  # the arithmetic: scores of another matmul shape are never mixed in
        }

    def run_info(self) -> dict[str, Any]:
        return {"chat_template_hash": self.fingerprint()["template"], "max_length": self.max_length,
                "counts": dict(self.counts)}

    # -- tokenization ---------------------------------------------------------------------
    def encode(self, prompt: str, response: str) -> list[int]:
        """Token ids of the whole conversation, produced in one templating step."""
        return self.encode_messages([{"role": "user", "content": prompt}], response)

    def encode_messages(self, messages: list[dict[str, str]], response: str) -> list[int]:
        """Token ids of a dialogue (`View.messages()`) plus the response, in one templating step."""
        if self.has_template:
            ids = self.tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": response}],
                                                     tokenize=True, return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return list(ids)
        *before, last = messages
        turns = "".join(f"{PLAIN_ROLES[m['role']]}: {m['content']}\n\n" for m in before)
        return self.tokenizer(turns + PLAIN_FORMAT.format(prompt=last["content"], response=response))["input_ids"]

    def fit(self, view: View, response: str) -> tuple[list[int] | None, bool, str]:
        """Ids within max_length, dropping least relevant posts first; (None, True, _) if impossible.

        Also returns the prompt text used (and the dialogue before it), which names the prompt.
        """
        ids, truncated, key, _ = self._fit(view, response)
        return ids, truncated, key

    def _view_ids(self, view: View, n: int, response: str) -> list[int]:
        # Multi-turn items go through the chat template as messages, never as one flattened turn.
        return self.encode_messages(view.messages(n), response) if view.turns else self.encode(view.prompt(n), response)

    def _fit(self, view: View, response: str) -> tuple[list[int] | None, bool, str, int]:
        """`fit`, plus the number of posts shown."""
        n = view.shown_posts
        ids = self._view_ids(view, n, response)
        truncated = False
        while len(ids) > self.max_length and n > 0:
            n -= 1
            truncated = True
            ids = self._view_ids(view, n, response)
        key = view.prompt(n) + ("\0" + view.transcript() if view.turns else "")
        if len(ids) > self.max_length:
            return None, True, key, n
        return ids, truncated, key, n

    # -- scoring --------------------------------------------------------------------------
    def _reduce(self, logits: Any) -> list[float]:
        k = logits.shape[-1]
        if k == 1:
            vals = logits[:, 0]
        elif self.label_index is not None:
            vals = logits[:, self.label_index]
        elif k == 2:
            vals = logits[:, 1] - logits[:, 0]
        else:
            raise ValueError(f"{self.spec}: {k} labels; pass label_index to pick the reward logit")
        return [float(v) for v in vals.float().cpu()]

    def _split_model(self) -> tuple[Any, Any] | None:
        """(backbone, score head) of a decoder RM, or None when the model pools internally."""
        head = getattr(self.model, "score", None)
        backbone = getattr(self.model, self.model.base_model_prefix, None)
        return (backbone, head) if head is not None and backbone is not None else None

    def _padded(self, seqs: Sequence[Sequence[int]], batch: Batch) -> Any:
        """Token ids [batch.rows, batch.width]: right-padded rows, filler rows repeating the last."""
        torch = self.torch
        ids = torch.full((batch.rows, batch.width), self.tokenizer.pad_token_id, dtype=torch.long)
        for row in range(batch.rows):
            seq = seqs[batch.index[min(row, len(batch.index) - 1)]]
            ids[row, : len(seq)] = torch.tensor(seq)
        return ids

    def forward(self, batch_ids: Sequence[list[int]]) -> list[float]:
        """Scores of whole sequences, each padded to its length bucket and batched only with its bucket.

        A decoder runs without a padding mask: with right padding and causal attention no real
        token ever sees a pad, and SDPA keeps its fused causal kernel. An encoder classifier gets
        the mask and pools internally (CLS), padding-safe by construction.
        """
        torch = self.torch
        out = [math.nan] * len(batch_ids)
        split = self._split_model()
        # an encoder's head runs on one pooled row per sequence: whole 8-row tiles (prbench.engines.buckets)
        multiple = 1 if split is not None else ROW_TILE
        for batch in bucketed_batches([len(x) for x in batch_ids], self.token_budget, self.batch_size,
                                      pads_rows(self.device), row_multiple=multiple):
            beat(f"scoring a batch of {len(batch.index)} sequences")
            ids = self._padded(batch_ids, batch)
            lengths = torch.tensor([len(batch_ids[batch.index[min(r, len(batch.index) - 1)]])
                                    for r in range(batch.rows)])
            with torch.no_grad(), sequence_windows(batch.width):
                if split is not None:
                    backbone, head = split
                    logits = head(backbone(input_ids=ids.to(self.device)).last_hidden_state)  # every position: see _at
                    logits = _at(torch, logits, lengths - 1)
                else:
                    mask = (torch.arange(batch.width)[None, :] < lengths[:, None]).long()
                    logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            for i, v in zip(batch.index, self._reduce(logits)):
                out[i] = v
            self.counts["tokens"] += sum(len(batch_ids[i]) for i in batch.index)
            self.counts["padded_tokens"] += batch.rows * batch.width
        return out

    def prompt_length(self, ids: Sequence[int], prompt_ids: Sequence[int]) -> int:
        """Tokens of `ids` that belong to its prompt (read from the sequence itself), leaving one or more for the response."""
        k, limit = 0, min(len(ids) - 1, len(prompt_ids))
        while k < limit and ids[k] == prompt_ids[k]:
            k += 1
        return k

    def _score_split(self, seqs: Sequence[list[int]], cuts: Sequence[int]) -> list[float]:
        """Each sequence as its prompt (`cuts[j]` tokens, run once per distinct prompt) plus its response from the prompt's KV cache.

        Every shape a sequence meets is fixed by its own lengths, so a score never depends on
        its neighbours: its prompt runs in the prompt's length bucket; its response runs in the
        response's length bucket against its prompt's cache widened to `kv_width`, in a batch
        that may hold responses to any prompts of one cache width (prompt caches are held until
        CACHE_BYTES, then their responses run). Prompts run causally without a mask (right padding is never
        seen); a response attends its prompt's real columns and its own tokens through the mask,
        at positions that continue its own prompt.
        """
        torch = self.torch
        split = self._split_model()
        assert split is not None  # share_prefix is on only for a model that splits (__init__)
        backbone, head = split
        kwarg = cache_kwarg(backbone)
        prompts: dict[tuple[int, ...], int] = {}
        owner = [prompts.setdefault(tuple(seq[:cut]), len(prompts)) for seq, cut in zip(seqs, cuts)]
        members: dict[int, list[int]] = {}
        for j, p in enumerate(owner):
            members.setdefault(p, []).append(j)
        plist = [list(p) for p in prompts]
        fixed = pads_rows(self.device)
        out = [math.nan] * len(seqs)
        held: list[Batch] = []
        caches = PromptCaches(torch)
        plan = bucketed_batches([len(p) for p in plist], self.token_budget, self.batch_size, fixed)
        for n, pre in enumerate(plan):
            beat(f"scoring {len(pre.index)} prompts")
            with torch.no_grad(), sequence_windows(pre.width):
                cache = output_cache(backbone(input_ids=self._padded(plist, pre).to(self.device), use_cache=True))
            caches.add(cache, pre.index, kv_width(pre.width))
            held.append(pre)
            self.counts["tokens"] += sum(len(plist[p]) for p in pre.index)
            self.counts["padded_tokens"] += pre.rows * pre.width
            self.counts["prefix_tokens_saved"] += sum(len(plist[p]) * (len(members[p]) - 1) for p in pre.index)
            if caches.nbytes < CACHE_BYTES and n + 1 < len(plan):
                continue
            by_width: dict[int, list[int]] = {}  # the responses of every held prompt, by cache width
            for b in held:
                by_width.setdefault(kv_width(b.width), []).extend(j for p in b.index for j in members[p])
            for width, todo in sorted(by_width.items()):
                for j, v in self._responses(todo, seqs, cuts, owner, width, caches, backbone, head, kwarg):
                    out[j] = v
            held, caches = [], PromptCaches(torch)
        return out

    def _responses(self, todo: Sequence[int], seqs: Sequence[list[int]], cuts: Sequence[int], owner: Sequence[int],
                   width: int, caches: PromptCaches, backbone: Any, head: Any, kwarg: str) -> list[tuple[int, float]]:
        """Scores of the responses `todo`, whose prompts' caches all have `width` columns, in response-length buckets."""
        torch = self.torch
        suffixes = [seqs[j][cuts[j]:] for j in todo]
        out: list[tuple[int, float]] = []
        for sub in bucketed_batches([len(x) for x in suffixes], self.token_budget, self.batch_size,
                                    pads_rows(self.device)):
            beat(f"scoring {len(sub.index)} responses from their prompts' cache")
            js = [todo[sub.index[min(r, len(sub.index) - 1)]] for r in range(sub.rows)]
            mask = torch.zeros((sub.rows, width + sub.width), dtype=torch.long)
            pos = torch.zeros((sub.rows, sub.width), dtype=torch.long)
            last = []
            for row, j in enumerate(js):
                mask[row, : cuts[j]] = 1
                mask[row, width : width + len(seqs[j]) - cuts[j]] = 1
                pos[row] = torch.arange(sub.width) + cuts[j]
                last.append(len(seqs[j]) - cuts[j] - 1)
            with torch.no_grad(), sequence_windows(sub.width):
                hidden = backbone(input_ids=self._padded(suffixes, sub).to(self.device),
                                  attention_mask=mask.to(self.device), position_ids=pos.to(self.device),
                                  use_cache=True, **{kwarg: caches.gather([owner[j] for j in js])}).last_hidden_state
                logits = _at(torch, head(hidden), torch.tensor(last))
            out.extend(zip(js[: len(sub.index)], self._reduce(logits)))
            self.counts["tokens"] += sum(len(suffixes[k]) for k in sub.index)
            self.counts["padded_tokens"] += sub.rows * sub.width
        return out

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        fitted = [self._fit(view, resp) for view, resp in batch]
        out: list[Score] = [Score(math.nan, truncated=tr, error="input exceeds max_length without any profile")
                            if ids is None else Score(math.nan, truncated=tr) for ids, tr, _, _ in fitted]
        ok = [i for i, f in enumerate(fitted) if f[0] is not None]
        seqs: list[list[int]] = [ids for ids, _, _, _ in fitted if ids is not None]  # in the order of `ok`
        if self.share_prefix:
            prompt_ids: dict[str, list[int]] = {}  # one templating per prompt: chosen and rejected share it
            cuts = []
            for i, seq in zip(ok, seqs):
                view, key, n = batch[i][0], fitted[i][2], fitted[i][3]
                if key not in prompt_ids:
                    prompt_ids[key] = self._view_ids(view, n, "")
                cuts.append(self.prompt_length(seq, prompt_ids[key]))
            # a prompt too short to pay for a pass of its own: the sequence runs whole (its own choice)
            split = [k for k, cut in enumerate(cuts) if cut >= MIN_SHARED_PREFIX]
            whole = [k for k, cut in enumerate(cuts) if cut < MIN_SHARED_PREFIX]
            values = [math.nan] * len(seqs)
            for ks, vs in ((split, self._score_split([seqs[k] for k in split], [cuts[k] for k in split])),
                           (whole, self.forward([seqs[k] for k in whole]))):
                for k, v in zip(ks, vs):
                    values[k] = v
        else:
            values = self.forward(seqs)
        for i, v in zip(ok, values):
            out[i].value = v
        self.counts["scored"] += len(batch)
        self.counts["truncated"] += sum(1 for f in fitted if f[1])
        self.counts["too_long"] += sum(1 for f in fitted if f[0] is None)
        return out


def _at(torch: Any, logits: Any, positions: Any) -> Any:
    """Row r's logits at `positions[r]`, from logits of every position.

    Why every position: the head then multiplies rows x width vectors (whole 8-row tiles), where
    one pooled vector per sequence would leave a partial tile that MKL computes another way.
    """
    return logits[torch.arange(logits.shape[0], device=logits.device), positions.to(logits.device)]


class VLLMClassifierRM(SequenceClassifierRM):
    """The same RM run on vLLM's pooling runner (`hf:DIR` with the option `engine=vllm`).

    Why: vLLM's continuous batching scores large runs faster on a GPU. Tokenization, the
    max_length rule (posts dropped first, counted) and the logit reduction are the classifier's
    own, so scores match the transformers path within float tolerance; vLLM returns raw logits
    (activation off). Architectures vLLM cannot classify (reward-model heads such as
    InternLM2ForRewardModel) are refused before any weights load.
    """

    def __init__(self, model: str, *, spec: str | None = None, max_length: int | None = None,
                 label_index: int | None = None, batch_size: int | None = None, device: str | None = None,
                 dtype: str = "auto", trust_remote_code: bool = False, vllm_options: dict[str, Any] | None = None,
                 **_: Any):
        from prbench.engines.vllm_engine import VLLMEngine

        self.spec = spec or f"hf:{model}"
        self.model_id = model
        opts = {"runner": "pooling", "dtype": dtype, "trust_remote_code": trust_remote_code, "device": device,
                **(vllm_options or {})}
        if max_length is not None:
            opts["max_length"] = max_length
        self.engine = VLLMEngine(model, **{k: v for k, v in opts.items() if v is not None})
        self.tokenizer = self.engine.tokenizer
        self.max_length = int(self.engine.max_model_len or max_length or 4096)
        self.batch_size = batch_size or 8
        self.label_index = label_index
        self.has_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.share_prefix = False
        self.counts = {"scored": 0, "truncated": 0, "too_long": 0, "tokens": 0}

    def fingerprint(self) -> dict[str, Any]:
        template = self.tokenizer.chat_template if self.has_template else PLAIN_FORMAT
        return {"spec": self.spec, "engine": self.engine.fingerprint(), "template": text_hash(str(template)),
                "max_length": self.max_length, "label_index": self.label_index}

    def _reduce_row(self, logits: Sequence[float]) -> float:
        k = len(logits)
        if k == 1:
            return float(logits[0])
        if self.label_index is not None:
            return float(logits[self.label_index])
        if k == 2:
            return float(logits[1] - logits[0])
        raise ValueError(f"{self.spec}: {k} labels; pass label_index to pick the reward logit")

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        from prbench.engines.vllm_engine import raw_pooling_params, token_prompt

        fitted = [self.fit(view, resp) for view, resp in batch]
        out = [Score(math.nan, truncated=tr, error="input exceeds max_length without any profile")
               if ids is None else Score(math.nan, truncated=tr) for ids, tr, _ in fitted]
        ok = [i for i, (ids, _, _) in enumerate(fitted) if ids is not None]
        if ok:
            eng = self.engine
            outputs = eng.llm.classify([token_prompt(ids) for ids, _, _ in fitted if ids is not None],
                                       pooling_params=raw_pooling_params(eng._vllm), use_tqdm=False)
            for i, o in zip(ok, outputs):
                out[i].value = self._reduce_row([float(x) for x in o.outputs.probs])
        self.counts["scored"] += len(batch)
        self.counts["truncated"] += sum(1 for _, tr, _ in fitted if tr)
        self.counts["too_long"] += sum(1 for ids, _, _ in fitted if ids is None)
        self.counts["tokens"] += sum(len(fitted[i][0] or ()) for i in ok)
        return out


def _load_classifier(rest: str, engine: str = "transformers", **options: Any) -> SequenceClassifierRM:
    """`hf:<hub id | dir>`; `engine="vllm"` scores it on vLLM's pooling runner."""
    from prbench.rewards.folders import check_classifier_folder

    check_classifier_folder(rest, "hf")  # missing, offline, or a prbench head folder: one clear line
    if engine == "vllm":
        return VLLMClassifierRM(rest, spec=f"hf:{rest}", **options)
    if engine not in ("transformers", "hf"):
        from prbench.errors import SpecError

        raise SpecError(f"hf: reward model engine must be 'transformers' or 'vllm', not {engine!r}")
    return SequenceClassifierRM(rest, spec=f"hf:{rest}", **options)


class ClassifierOptions(RMOptions):
    """Options of a sequence-classifier RM (`hf:`, a full `bt:` folder, `finetune:`)."""

    engine: Literal["transformers", "hf", "vllm"] = "transformers"
    device: str | None = "auto"
    dtype: str = "auto"
    max_length: int | None = None
    token_budget: int | None = None
    trust_remote_code: bool = False
    label_index: int | None = None
    share_prefix: bool = True
    vllm_options: dict[str, Any] | None = None


load_classifier = Kind(
    _load_classifier, options_model=ClassifierOptions, resolve_spec=model_or_builtin,
    model_class=lambda rest, engine="transformers": VLLMClassifierRM if engine == "vllm" else SequenceClassifierRM)
