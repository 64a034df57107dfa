"""Batch-invariant scoring at batching speed: bucketed batches versus one-at-a-time and plain batching.

Measured in one process, same model, same texts, the three sides alternating `--repeats` times
(the median counts):

Sentence embeddings (MiniLM, the texts `baseline:embedding` encodes under `profile`: responses
and the top-10 posts of each item of the built-in sample, in chunks of `--chunk` items):
- **alone**: each text encoded in a batch of its own (prbench's previous `encode_alone`);
- **plain**: `SentenceTransformer.encode(texts, batch_size=32)`, padding to the longest text of
  each length-sorted batch (the library's own batching; not batch-invariant);
- **bucketed**: `prbench.engines.builtin.encode_texts` (length buckets, batch-invariant).

Transformer RM (a random-head decoder classifier, the pairs of the sample under `profile`):
- **alone**: `SequenceClassifierRM.score` one response at a time;
- **plain**: prbench's previous scoring loop, rebuilt here from `engines/prefix.py`: the common
  prefix of each prompt group run once, prefixes and responses batched by similar length and
  padded to the longest (not batch-invariant);
- **bucketed**: `SequenceClassifierRM.score` (prompts and responses in length buckets).

Each run also checks bytes: bucketed results at chunk sizes 1, 7 and 64 against each other.

    python benchmarks/invariance.py                 # tiny RM + MiniLM, a few minutes on 2 cores
    python benchmarks/invariance.py --smollm2 8     # + SmolLM2-135M (random head) on 8 pairs
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prbench.conditions import View, build_views
from prbench.data import load_examples
from prbench.engines.builtin import encode_texts, load_sentence_encoder
from prbench.engines.prefix import cache_kwarg, efficient_batches, group_by_prefix, output_cache, run_shared
from prbench.retrieval import load_retriever
from prbench.rewards.baselines import context_units
from prbench.rewards.classifier import SequenceClassifierRM

HERE = Path(__file__).resolve().parent


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def alternate(sides: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds per side per repeat, the sides interleaved so machine drift hits all alike."""
    secs: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            secs[name].append(timed(fn)[0])
    return secs


def summarize(secs: dict[str, list[float]]) -> dict[str, Any]:
    med = {k: statistics.median(v) for k, v in secs.items()}
    return {"seconds": secs, "median_s": med, "bucketed_over_plain": med["bucketed"] / med["plain"],
            "alone_over_plain": med["alone"] / med["plain"]}


# -- embeddings ------------------------------------------------------------------------------------


def embedding_chunks(views: Sequence[View], responses: Sequence[tuple[str, str]], chunk: int) -> list[list[str]]:
    """The distinct texts `baseline:embedding` encodes per call, for calls of `chunk` items."""
    out = []
    for s in range(0, len(views), chunk):
        texts = [t for v, (c, r) in zip(views[s:s + chunk], responses[s:s + chunk])
                 for t in (c, r, *context_units(v))]
        out.append(list(dict.fromkeys(texts)))
    return out


def bench_embeddings(views: Sequence[View], responses: Sequence[tuple[str, str]], chunk: int,
                     repeats: int) -> dict[str, Any]:
    enc = load_sentence_encoder("builtin:minilm-l6")
    calls = embedding_chunks(views, responses, chunk)

    def alone() -> list[Any]:
        return [np.stack([enc.encode([t], normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)[0] for t in texts]) for texts in calls]

    def plain() -> list[Any]:
        return [enc.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=False) for texts in calls]

    def bucketed() -> list[Any]:
        return [encode_texts(enc, texts) for texts in calls]

    res = summarize(alternate({"alone": alone, "plain": plain, "bucketed": bucketed}, repeats))
    texts = list(dict.fromkeys(t for c in calls for t in c))
    tokens = [int(n) for n in enc.preprocess(texts)["attention_mask"].sum(1)]
    by_size = {}
    for size in (1, 7, 64):
        vec = np.concatenate([encode_texts(enc, texts[s:s + size]) for s in range(0, len(texts), size)])
        by_size[size] = vec.tobytes()
        plain_vec = np.concatenate([enc.encode(texts[s:s + size], batch_size=32, normalize_embeddings=True,
                                               show_progress_bar=False) for s in range(0, len(texts), size)])
        by_size[f"plain{size}"] = plain_vec.tobytes()
    res.update(calls=len(calls), texts=sum(map(len, calls)), distinct_texts=len(texts),
               mean_tokens=statistics.mean(tokens),
               bucketed_identical_1_7_64=by_size[1] == by_size[7] == by_size[64],
               plain_identical_1_7_64=by_size["plain1"] == by_size["plain7"] == by_size["plain64"])
    return res


# -- transformer RM ---------------------------------------------------------------------------------


def plain_rm_scores(rm: SequenceClassifierRM, batch: Sequence[tuple[View, str]]) -> list[float]:
    """prbench's scoring loop before buckets: shared common prefixes, similar-length batches padded to the longest."""
    fitted = [rm.fit(v, r) for v, r in batch]
    seqs = [f[0] for f in fitted]
    assert all(s is not None for s in seqs)
    groups = group_by_prefix(seqs, [f[2] for f in fitted])  # type: ignore[arg-type]
    backbone, head = rm._split_model()  # type: ignore[misc]
    kwarg = cache_kwarg(backbone)
    out = [math.nan] * len(seqs)

    def prefill(ids: Any, mask: Any) -> Any:
        return output_cache(backbone(input_ids=ids, attention_mask=mask, use_cache=True))

    def extend(ids: Any, mask: Any, pos: Any, cache: Any, _: list[int]) -> list[float]:
        hidden = backbone(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                          **{kwarg: cache}).last_hidden_state
        last = mask[:, -ids.shape[1]:].sum(1) - 1
        return rm._reduce(head(hidden[torch.arange(len(ids)), last]))

    with torch.no_grad():
        for j, v in run_shared(groups, prefill, extend, torch=torch, pad_id=rm.tokenizer.pad_token_id,
                               device="cpu", token_budget=rm.token_budget, max_rows=rm.batch_size).items():
            out[j] = v
        rest = groups.rest
        for group in efficient_batches([len(seqs[i]) for i in rest], rm.token_budget, rm.batch_size):  # type: ignore[arg-type]
            idx = [rest[j] for j in group]
            width = max(len(seqs[i]) for i in idx)  # type: ignore[arg-type]
            ids = torch.full((len(idx), width), rm.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, : len(seqs[i])] = torch.tensor(seqs[i])  # type: ignore[arg-type]
                mask[r, : len(seqs[i])] = 1  # type: ignore[arg-type]
            hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
            for i, v in zip(idx, rm._reduce(head(hidden[torch.arange(len(idx)), mask.sum(1) - 1]))):
                out[i] = v
    return out


def bench_rm(rm: SequenceClassifierRM, batch: list[tuple[View, str]], chunk: int, repeats: int) -> dict[str, Any]:
    calls = [batch[s:s + chunk] for s in range(0, len(batch), chunk)]
    sides = {"alone": lambda: [rm.score([x]) for x in batch],
             "plain": lambda: [plain_rm_scores(rm, c) for c in calls],
             "bucketed": lambda: [rm.score(c) for c in calls]}
    res = summarize(alternate(sides, repeats))
    by_size = {size: [s.value for c in range(0, len(batch), size) for s in rm.score(batch[c:c + size])]
               for size in (1, 7, 64)}
    plain = {size: [v for c in range(0, len(batch), size) for v in plain_rm_scores(rm, batch[c:c + size])]
             for size in (2, 8, 64)}  # plain needs pairs together: its groups are formed per call
    res.update(sequences=len(batch), chunk=chunk,
               bucketed_identical_1_7_64=by_size[1] == by_size[7] == by_size[64],
               plain_identical_2_8_64=plain[2] == plain[8] == plain[64],
               max_plain_vs_bucketed=max(abs(a - b) for a, b in zip(plain[64], by_size[64])))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=64, help="items per RM call (eval's --batch-size)")
    ap.add_argument("--items", type=int, default=63)
    ap.add_argument("--smollm2", type=int, default=0, help="also SmolLM2-135M (random head) on this many pairs")
    ap.add_argument("--out", type=Path, default=HERE / "results_invariance.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    items = load_examples("sample", limit=args.items)
    views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=10)
    results: dict[str, Any] = {"machine": platform.platform(), "torch": torch.__version__,
                               "threads": torch.get_num_threads(), "repeats": args.repeats}
    results["embeddings"] = bench_embeddings(views, [(ex.chosen, ex.rejected) for ex in items], args.chunk,
                                             args.repeats)
    print(json.dumps({k: v for k, v in results["embeddings"].items() if k != "seconds"}, indent=1), flush=True)
    from prbench.testing.tiny import make_tiny_seq_classifier

    with tempfile.TemporaryDirectory() as tmp:
        tiny = SequenceClassifierRM(str(make_tiny_seq_classifier(Path(tmp) / "rm", hidden_size=64)), device="cpu")
        tiny_views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=1)  # fits 1024 byte-tokens
        batch = [(v, r) for ex, v in zip(items, tiny_views) for r in (ex.chosen, ex.rejected)]
        results["tiny_rm"] = bench_rm(tiny, batch, 2 * args.chunk, args.repeats)
        print(json.dumps({k: v for k, v in results["tiny_rm"].items() if k != "seconds"}, indent=1), flush=True)
    if args.smollm2:
        smol = SequenceClassifierRM("builtin:smollm2-135m-instruct", spec="hf:builtin:smollm2-135m-instruct",
                                    device="cpu")
        batch = [(v, r) for ex, v in zip(items[: args.smollm2], views) for r in (ex.chosen, ex.rejected)]
        results["smollm2_rm"] = bench_rm(smol, batch, 2 * args.chunk, max(1, args.repeats - 2))
        print(json.dumps({k: v for k, v in results["smollm2_rm"].items() if k != "seconds"}, indent=1), flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
