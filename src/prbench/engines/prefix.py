"""Shared-prefix scoring for local decoder models: each prompt runs once, every response continues from its KV cache.

Responses to one prompt (chosen and rejected; N Best-of-N samples) share every token before the
response: template, question, profile or rubric. Under `profile` that prefix is most of the
tokens, so running it once per prompt instead of once per response nearly halves the work.

Padding is kept in check twice: prefixes are batched with prefixes of similar length, and the
responses of one prefix batch are re-batched by their own length, each sub-batch reading only
its rows of the prefix cache. Every batch keeps real / processed tokens >= MIN_EFFICIENCY, so
padding cannot eat the saving (a batch of one is always 100%). On CPU, a prefix batch holds at
most CPU_BATCH_TOKENS padded tokens, and a batch without padding runs without a mask: one
1,000-token row already keeps a CPU's matmuls busy, while a padding mask costs SDPA its fused
causal kernel (SmolLM2-135M, 1,500-token rows: 2.90 s per padded row in a batch of 4, 2.57 s
alone, 2.32 s in an unpadded batch). Short prefixes (the `none` condition) still batch.

Callers supply two model calls (`prefill`, `extend`), so sequence classifiers (score at the last
token) and causal LMs (log-probs of every response token) share one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.runtime.progress import beat

MIN_SHARED_PREFIX = 8  # below this, a separate prefix pass costs more than it saves
MIN_EFFICIENCY = 0.9  # real / processed tokens, per batch
CPU_BATCH_TOKENS = 1024  # padded tokens per prefix batch on CPU (see the module doc)


def common_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
    """Longest common prefix of token lists, leaving every sequence at least `keep` own tokens."""
    first = seqs[0]
    n = min(len(x) for x in seqs) - keep
    for other in seqs[1:]:
        k = 0
        while k < n and other[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def efficient_batches(lengths: Sequence[int], token_budget: int, max_rows: int | None = None,
                      min_efficiency: float = MIN_EFFICIENCY) -> list[list[int]]:
    """Indices in batches of similar length: padded size <= token_budget, padding efficiency >= min_efficiency.

    Greedy over lengths sorted ascending (ties by index, so the batching is deterministic).
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in order:
        width = lengths[i]  # ascending: the newcomer is the widest
        rows = len(cur) + 1
        if cur and (rows * width > token_budget or (max_rows and rows > max_rows)
                    or (real + width) < min_efficiency * rows * width):
            batches.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += width
    if cur:
        batches.append(cur)
    return batches


@dataclass
class SharedGroups:
    """Sequences split into prompt groups that share a prefix, and the rest (scored whole)."""

    prefixes: list[list[int]] = field(default_factory=list)
    suffixes: list[tuple[int, int, list[int]]] = field(default_factory=list)  # (sequence index, group, tokens)
    rest: list[int] = field(default_factory=list)


def group_by_prefix(seqs: Sequence[list[int]], keys: Sequence[Hashable],
                    limits: Sequence[int] | None = None) -> SharedGroups:
    """Group sequences with equal `keys` (same prompt) and cut each group at its common prefix.

    `limits[i]` caps how far sequence i's shared part may reach (e.g. its prompt length - 1, so
    a log-likelihood keeps the position that predicts the first response token). Groups of one,
    or whose prefix is shorter than MIN_SHARED_PREFIX, go to `rest`.
    """
    by_key: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    out = SharedGroups()
    for members in by_key.values():
        cut = common_prefix_length([seqs[i] for i in members]) if len(members) > 1 else 0
        if limits is not None:
            cut = min([cut] + [limits[i] for i in members])
        if len(members) < 2 or cut < MIN_SHARED_PREFIX:
            out.rest.extend(members)
            continue
        g = len(out.prefixes)
        out.prefixes.append(list(seqs[members[0]][:cut]))
        out.suffixes.extend((i, g, list(seqs[i][cut:])) for i in members)
    return out


Prefill = Callable[[Any, Any], Any]  # (ids [B, P], mask [B, P] or None when unpadded) -> KV cache
Extend = Callable[[Any, Any, Any, Any, list[int]], list[Any]]  # (ids, mask, pos, cache, seq indices) -> per row


def run_shared(groups: SharedGroups, prefill: Prefill, extend: Extend, *, torch: Any, pad_id: int,
               device: str, token_budget: int, max_rows: int | None = None,
               counts: dict[str, int] | None = None) -> dict[int, Any]:
    """Run every prefix once and every suffix from its prefix's cache; results keyed by sequence index.

    `counts` (when given) gains `tokens` (real), `padded_tokens` (processed) and
    `prefix_tokens_saved` (prefix tokens a full pass would have run again).
    """
    results: dict[int, Any] = {}
    pre_len = [len(p) for p in groups.prefixes]
    by_group: dict[int, list[int]] = {}
    for k, (_, g, _) in enumerate(groups.suffixes):
        by_group.setdefault(g, []).append(k)
    pre_budget = min(token_budget, CPU_BATCH_TOKENS) if str(device).startswith("cpu") else token_budget
    for pre_batch in efficient_batches(pre_len, pre_budget, max_rows):
        width = max(pre_len[g] for g in pre_batch)
        ids = torch.full((len(pre_batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(pre_batch), width), dtype=torch.long)
        for row, g in enumerate(pre_batch):
            ids[row, : pre_len[g]] = torch.tensor(groups.prefixes[g])
            mask[row, : pre_len[g]] = 1
        cache = prefill(ids.to(device), None if bool(mask.all()) else mask.to(device))
        row_of = {g: row for row, g in enumerate(pre_batch)}
        todo = [k for g in pre_batch for k in by_group[g]]
        suf_len = [len(groups.suffixes[k][2]) for k in todo]
        processed = len(pre_batch) * width
        for sub in efficient_batches(suf_len, token_budget, max_rows):
            beat(f"scoring {len(sub)} continuations of shared prompts")
            ks = [todo[j] for j in sub]
            gs = [groups.suffixes[k][1] for k in ks]
            keep = max(pre_len[g] for g in gs)  # prefix columns these rows need
            sw = max(suf_len[j] for j in sub)
            s_ids = torch.full((len(ks), sw), pad_id, dtype=torch.long)
            s_mask = torch.zeros((len(ks), keep + sw), dtype=torch.long)
            pos = torch.zeros((len(ks), sw), dtype=torch.long)
            for row, (k, g) in enumerate(zip(ks, gs)):
                tokens = groups.suffixes[k][2]
                s_ids[row, : len(tokens)] = torch.tensor(tokens)
                s_mask[row, : pre_len[g]] = 1
                s_mask[row, keep : keep + len(tokens)] = 1
                pos[row] = torch.arange(sw) + pre_len[g]
            rows = torch.tensor([row_of[g] for g in gs], device=device)
            sub_cache = select_rows(cache, rows, keep)
            values = extend(s_ids.to(device), s_mask.to(device), pos.to(device), sub_cache,
                            [groups.suffixes[k][0] for k in ks])
            for k, v in zip(ks, values):
                results[groups.suffixes[k][0]] = v
            processed += len(ks) * sw
        if counts is not None:
            counts["tokens"] = counts.get("tokens", 0) + sum(pre_len[g] for g in pre_batch) + sum(suf_len)
            counts["padded_tokens"] = counts.get("padded_tokens", 0) + processed
            counts["prefix_tokens_saved"] = counts.get("prefix_tokens_saved", 0) + sum(
                pre_len[g] * (len(by_group[g]) - 1) for g in pre_batch)
    return results


def select_rows(cache: Any, rows: Any, length: int) -> Any:
    """A new cache holding `rows` of `cache`, first `length` positions (the original is untouched)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(layer.keys[rows, :, :length], layer.values[rows, :, :length])
                                        for layer in cache.layers])


class PromptCaches:
    """KV caches of prompt batches, each widened with masked zero columns to one cache width; any rows gathered into one cache.

    Why: responses to different prompts can then share a batch whenever their prompts' caches
    have the same width (`prbench.engines.buckets.kv_width`), instead of only responses whose
    prompts ran in the same batch.
    """

    def __init__(self, torch: Any):
        self.torch = torch
        self.chunks: dict[int, list[list[tuple[Any, Any]]]] = {}  # cache width -> per batch, per layer (keys, values)
        self.joined: dict[int, list[tuple[Any, Any]]] = {}
        self.place: dict[int, tuple[int, int]] = {}  # prompt -> (cache width, row)
        self.nbytes = 0

    def add(self, cache: Any, prompts: Sequence[int], width: int) -> None:
        """Keep the first len(prompts) rows of `cache` (filler rows dropped), widened to `width` columns."""
        if width in self.joined:
            raise RuntimeError("PromptCaches: every prompt of a width is added before its rows are gathered")
        pad = self.torch.nn.functional.pad
        n = len(prompts)
        chunks = self.chunks.setdefault(width, [])
        start = sum(layers[0][0].shape[0] for layers in chunks)
        grow = width - cache.layers[0].keys.shape[2]
        chunks.append([(pad(layer.keys[:n], (0, 0, 0, grow)), pad(layer.values[:n], (0, 0, 0, grow)))
                       for layer in cache.layers])
        self.nbytes += sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in chunks[-1])
        for row, p in enumerate(prompts):
            self.place[p] = (width, start + row)

    def gather(self, prompts: Sequence[int]) -> Any:
        """One cache holding the rows of `prompts` (all of one cache width), in that order."""
        from transformers import DynamicCache

        torch = self.torch
        width = self.place[prompts[0]][0]
        if width not in self.joined:
            chunks = self.chunks.pop(width)
            self.joined[width] = chunks[0] if len(chunks) == 1 else [
                (torch.cat([c[i][0] for c in chunks]), torch.cat([c[i][1] for c in chunks])) for i in range(len(chunks[0]))]
        rows = torch.tensor([self.place[p][1] for p in prompts], device=self.joined[width][0][0].device)
        return DynamicCache(ddp_cache_data=[(k.index_select(0, rows), v.index_select(0, rows))
                                            for k, v in self.joined[width]])


def supports_sharing(model: Any) -> bool:
    """True for decoder models whose KV cache is the plain per-layer kind (no sliding windows, no state)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        return False
    return not getattr(text, "sliding_window", None) or not getattr(text, "use_sliding_window", True)


def cache_kwarg(module: Any) -> str:
    """transformers 5.x renamed `past_key_values` to `cache` in some forwards; support both."""
    import inspect

    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The KV cache a forward returned (`cache` in transformers 5.x, `past_key_values` before)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
