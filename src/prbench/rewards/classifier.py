"""Sequence-classifier reward models (`hf:<hub id | dir>`, `bt:<dir>`), scored correctly.

- The chat template is applied and tokenized in ONE step, so BOS is never added twice.
  Models without a chat template get the plain format "User: ...\\n\\nAssistant: ..." with
  the tokenizer's own special tokens.
- Scores are read at the last real token via the attention mask, so they do not depend on
  batch size or padding, even when the pad token equals EOS.
- One logit -> that logit; two -> logit[1] - logit[0] (log-odds of the positive class);
  more -> the `label_index` the user names (else an error).
- Shared-prefix scoring: responses to the same prompt (chosen and rejected; N Best-of-N
  samples) share every token before the response. For decoder RMs the shared prefix runs
  once and each response is scored from its KV cache (equal to full scoring within float
  tolerance, tested); under `profile` the prefix is most of the tokens.
- Over `max_length`: least relevant profile posts are dropped first (counted per response as
  `truncated`); the response is never cut. If even the bare question does not fit, the
  score is invalid (counted), never silently truncated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from prbench.cache import text_hash
from prbench.conditions import View
from prbench.engines.prefix import (
    SharedGroups,
    cache_kwarg,
    efficient_batches,
    group_by_prefix,
    output_cache,
    run_shared,
    supports_sharing,
)
from prbench.extras import require
from prbench.fingerprint import local_digest
from prbench.progress import beat
from prbench.rewards.base import PointwiseRM, Score
from prbench.specs import RMOptions, model_or_builtin

PLAIN_FORMAT = "User: {prompt}\n\nAssistant: {response}"
PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}  # earlier turns, same plain form


def resolve_device(device: str = "auto") -> str:
    """`auto` / `cuda` -> this rank's GPU (`prbench.ranks.cuda_device`), read at load time; else as given."""
    from prbench.ranks import cuda_device

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

        Also returns the prompt text used, so responses to one prompt can share its prefix.
        """
        def ids_for(n: int) -> list[int]:
            # Multi-turn items go through the chat template as messages, never as one flattened turn.
            return self.encode_messages(view.messages(n), response) if view.turns else self.encode(view.prompt(n), response)

        n = view.shown_posts
        ids = ids_for(n)
        truncated = False
        while len(ids) > self.max_length and n > 0:
            n -= 1
            truncated = True
            ids = ids_for(n)
        # The grouping key of shared-prefix scoring: the prompt, and the dialogue before it when there is one.
        key = view.prompt(n) + ("\0" + view.transcript() if view.turns else "")
        if len(ids) > self.max_length:
            return None, True, key
        return ids, truncated, key

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

    def forward(self, batch_ids: Sequence[list[int]]) -> list[float]:
        """Score already-tokenized sequences; right padding, last real token by attention mask."""
        torch = self.torch
        width = max(len(x) for x in batch_ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(batch_ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
        for i, ids in enumerate(batch_ids):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            mask[i, : len(ids)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        last = mask.sum(1) - 1
        split = self._split_model()
        with torch.no_grad():
            if split is not None:
                backbone, head = split
                hidden = backbone(input_ids=input_ids, attention_mask=mask).last_hidden_state
                logits = head(hidden[torch.arange(len(batch_ids), device=hidden.device), last])
            else:  # encoder classifiers pool internally (CLS), padding-safe by construction
                logits = self.model(input_ids=input_ids, attention_mask=mask).logits
        self.counts["tokens"] += int(mask.sum())
        self.counts["padded_tokens"] += int(mask.numel())
        return self._reduce(logits)

    def _split_model(self) -> tuple[Any, Any] | None:
        """(backbone, score head) of a decoder RM, or None when the model pools internally."""
        head = getattr(self.model, "score", None)
        backbone = getattr(self.model, self.model.base_model_prefix, None)
        return (backbone, head) if head is not None and backbone is not None else None

    def _score_shared(self, groups: SharedGroups) -> dict[int, float]:
        """Scores of prefix + suffix for every grouped sequence, each prefix run once (engines/prefix.py)."""
        torch = self.torch
        backbone, head = self._split_model()  # type: ignore[misc]
        kwarg = cache_kwarg(backbone)

        def prefill(ids: Any, mask: Any) -> Any:
            return output_cache(backbone(input_ids=ids, attention_mask=mask, use_cache=True))

        def extend(ids: Any, mask: Any, pos: Any, cache: Any, _: list[int]) -> list[float]:
            hidden = backbone(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                              **{kwarg: cache}).last_hidden_state
            last = mask[:, -ids.shape[1]:].sum(1) - 1
            return self._reduce(head(hidden[torch.arange(len(ids), device=hidden.device), last]))

        with torch.no_grad():
            return run_shared(groups, prefill, extend, torch=torch, pad_id=self.tokenizer.pad_token_id,
                              device=self.device, token_budget=self.token_budget, max_rows=self.batch_size,
                              counts=self.counts)

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        fitted = [self.fit(view, resp) for view, resp in batch]
        out: list[Score] = [Score(math.nan, truncated=tr, error="input exceeds max_length without any profile")
                            if ids is None else Score(math.nan, truncated=tr) for ids, tr, _ in fitted]
        ok = [i for i, (ids, _, _) in enumerate(fitted) if ids is not None]
        rest = ok
        if self.share_prefix:  # responses to the same prompt text share its tokens
            groups = group_by_prefix([fitted[i][0] for i in ok], [fitted[i][2] for i in ok])  # type: ignore[misc]
            for j, v in self._score_shared(groups).items():
                out[ok[j]].value = v
            rest = [ok[j] for j in groups.rest]
        for group in efficient_batches([len(fitted[i][0]) for i in rest], self.token_budget,  # type: ignore[arg-type]
                                       self.batch_size):
            idx = [rest[j] for j in group]
            beat(f"scoring a batch of {len(idx)} sequences")
            for i, v in zip(idx, self.forward([fitted[i][0] for i in idx])):  # type: ignore[misc]
                out[i].value = v
        self.counts["scored"] += len(batch)
        self.counts["truncated"] += sum(1 for _, tr, _ in fitted if tr)
        self.counts["too_long"] += sum(1 for ids, _, _ in fitted if ids is None)
        return out


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
            outputs = eng.llm.classify([token_prompt(fitted[i][0]) for i in ok],  # type: ignore[arg-type]
                                       pooling_params=raw_pooling_params(eng._vllm), use_tqdm=False)
            for i, o in zip(ok, outputs):
                out[i].value = self._reduce_row([float(x) for x in o.outputs.probs])
        self.counts["scored"] += len(batch)
        self.counts["truncated"] += sum(1 for _, tr, _ in fitted if tr)
        self.counts["too_long"] += sum(1 for ids, _, _ in fitted if ids is None)
        self.counts["tokens"] += sum(len(fitted[i][0]) for i in ok)  # type: ignore[arg-type]
        return out


def load_classifier(rest: str, engine: str = "transformers", **options: Any) -> SequenceClassifierRM:
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


load_classifier.options_model = ClassifierOptions  # type: ignore[attr-defined]
load_classifier.resolve_spec = model_or_builtin  # type: ignore[attr-defined]
load_classifier.model_class = (  # type: ignore[attr-defined]
    lambda rest, engine="transformers": VLLMClassifierRM if engine == "vllm" else SequenceClassifierRM)
