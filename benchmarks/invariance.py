"""Batch-invariant scoring at batching speed: bucketed batches versus one-at-a-time and plain batching.

Measured in one process, same model, same texts, the three sides alternating `--repeats` times
(the median counts):

Sentence embeddings (MiniLM, the texts `baseline:embedding` encodes under `profile`: responses
and the top-10 posts of each item of the built-in sample, in chunks of `--chunk` items):
- **alone**: each text encoded in a batch of its own (prbench's previous `encode_alone`);
- **plain**: `SentenceTransformer.encode(texts, batch_size=32)`, padding to the longest text of
  each length-sorted batch (the library's own batching and matmuls; not batch-invariant);
- **bucketed**: `prbench.engines.builtin.encode_texts` (length buckets and fixed-row matmuls,
  batch-invariant).

Transformer RM (a random-head decoder classifier, the pairs of the sample under `profile`):
- **alone**: `SequenceClassifierRM.score` one response at a time;
- **plain**: prbench's previous scoring loop, rebuilt here from `engines/prefix.py` on a copy of
  the model with torch's own matmuls: the common prefix of each prompt group run once, prefixes
  and responses batched by similar length and padded to the longest (not batch-invariant);
- **bucketed**: `SequenceClassifierRM.score` (prompts and responses in length buckets, responses
  batched across prompts, fixed-row matmuls).

Each run also checks bytes: bucketed results at chunk sizes 1, 7 and 64 against each other. Each
timing records the load average (`os.getloadavg`, 1 minute) and the process CPU time beside the
wall time: on a shared machine, quote the ratios of the alternating runs, with the load.

    python benchmarks/invariance.py                       # tiny RM + MiniLM on 63 items, ~10 min on 2 cores
    python benchmarks/invariance.py --smollm2 32          # + SmolLM2-135M (random head) on 32 pairs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prbench.context.conditions import View, build_views
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.engines.builtin import builtin_path, encode_texts, load_sentence_encoder
from prbench.engines.fixed_gemm import unfix_gemm_rows
from prbench.engines.prefix import cache_kwarg, efficient_batches, group_by_prefix, output_cache, run_shared
from prbench.rewards.baselines import context_units
from prbench.rewards.classifier import SequenceClassifierRM

HERE = Path(__file__).resolve().parent


def timed(fn: Callable[[], Any]) -> dict[str, float]:
    """Wall and process CPU seconds of one call, with the 1-minute load average before and after."""
    load, cpu, t = os.getloadavg()[0], time.process_time(), time.perf_counter()
    fn()
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu,
            "load": round((load + os.getloadavg()[0]) / 2, 2)}


def alternate(sides: dict[str, Callable[[], Any]], repeats: int, once: Sequence[str] = ()) -> dict[str, list[dict]]:
    """Timings per side per repeat, the sides interleaved so machine drift hits all alike (`once`: first repeat only)."""
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for r in range(repeats):
        for name, fn in sides.items():
            if r == 0 or name not in once:
                runs[name].append(timed(fn))
    return runs


def summarize(runs: dict[str, list[dict]]) -> dict[str, Any]:
    med = {k: statistics.median(x["wall_s"] for x in v) for k, v in runs.items()}
    cpu = {k: statistics.median(x["cpu_s"] for x in v) for k, v in runs.items()}
    pairs = list(zip(runs["bucketed"], runs["plain"]))  # the same repeat: side by side
    return {"runs": runs, "median_s": med, "median_cpu_s": cpu,
            "bucketed_over_plain": med["bucketed"] / med["plain"],
            "bucketed_over_plain_per_repeat": [b["wall_s"] / p["wall_s"] for b, p in pairs],
            "bucketed_over_plain_cpu": cpu["bucketed"] / cpu["plain"],
            "alone_over_plain": med["alone"] / med["plain"],
            "load_range": [min(x["load"] for v in runs.values() for x in v),
                           max(x["load"] for v in runs.values() for x in v)]}


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
    from sentence_transformers import SentenceTransformer

    enc = load_sentence_encoder("builtin:minilm-l6")
    lib = SentenceTransformer(str(builtin_path("builtin:minilm-l6")), device="cpu", local_files_only=True)  # torch's matmuls
    calls = embedding_chunks(views, responses, chunk)

    def alone() -> list[Any]:
        return [np.stack([lib.encode([t], normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)[0] for t in texts]) for texts in calls]

    def plain() -> list[Any]:
        return [lib.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=False) for texts in calls]

    def bucketed() -> list[Any]:
        return [encode_texts(enc, texts) for texts in calls]

    res = summarize(alternate({"alone": alone, "plain": plain, "bucketed": bucketed}, repeats, once=("alone",)))
    texts = list(dict.fromkeys(t for c in calls for t in c))
    tokens = [int(n) for n in enc.preprocess(texts)["attention_mask"].sum(1)]
    by_size = {}
    for size in (1, 7, 64):
        vec = np.concatenate([encode_texts(enc, texts[s:s + size]) for s in range(0, len(texts), size)])
        by_size[size] = vec.tobytes()
        plain_vec = np.concatenate([lib.encode(texts[s:s + size], batch_size=32, normalize_embeddings=True,
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


def bench_rm(make: Callable[[], SequenceClassifierRM], batch: list[tuple[View, str]], chunk: int,
             repeats: int, plain_bytes: bool = True) -> dict[str, Any]:
    """`make` loads the RM twice: prbench's, and a copy with torch's own matmuls for the plain side."""
    rm, lib = make(), make()
    lib.model.load_state_dict(rm.model.state_dict())  # one (random) score head for both
    unfix_gemm_rows(lib.model)
    calls = [batch[s:s + chunk] for s in range(0, len(batch), chunk)]
    sides = {"alone": lambda: [rm.score([x]) for x in batch],
             "plain": lambda: [plain_rm_scores(lib, c) for c in calls],
             "bucketed": lambda: [rm.score(c) for c in calls]}
    res = summarize(alternate(sides, repeats, once=("alone",)))
    by_size = {size: [s.value for c in range(0, len(batch), size) for s in rm.score(batch[c:c + size])]
               for size in (1, 7, 64)}
    res.update(sequences=len(batch), chunk=chunk, counts=dict(rm.counts),
               bucketed_identical_1_7_64=by_size[1] == by_size[7] == by_size[64])
    plain = {size: [v for c in range(0, len(batch), size) for v in plain_rm_scores(lib, batch[c:c + size])]
             for size in ((2, 8, 64) if plain_bytes else (64,))}  # plain needs pairs together: groups form per call
    if plain_bytes:
        res["plain_identical_2_8_64"] = plain[2] == plain[8] == plain[64]
    res["max_plain_vs_bucketed"] = max(abs(a - b) for a, b in zip(plain[64], by_size[64]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="plain and bucketed; alone runs once")
    ap.add_argument("--chunk", type=int, default=64, help="items per RM call (eval's --batch-size)")
    ap.add_argument("--items", type=int, default=63)
    ap.add_argument("--smollm2", type=int, default=0, help="also SmolLM2-135M (random head) on this many pairs")
    ap.add_argument("--smollm2-repeats", type=int, default=2)
    ap.add_argument("--skip-tiny", action="store_true", help="SmolLM2 only (skip MiniLM and the tiny RM)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    ap.add_argument("--out", type=Path, default=HERE / "results_invariance.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    items = load_examples("sample", limit=args.items)
    views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=10)
    results: dict[str, Any] = {"machine": platform.platform(), "torch": torch.__version__,
                               "threads": torch.get_num_threads(), "repeats": args.repeats, "items": args.items,
                               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def keep(name: str, res: dict[str, Any]) -> None:
        results[name] = res
        print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1), flush=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")  # partial results survive a stop

    if not args.skip_tiny:
        keep("embeddings", bench_embeddings(views, [(ex.chosen, ex.rejected) for ex in items], args.chunk,
                                            args.repeats))
        from prbench.testing.tiny import make_tiny_seq_classifier

        with tempfile.TemporaryDirectory() as tmp:
            path = str(make_tiny_seq_classifier(Path(tmp) / "rm", hidden_size=64))
            tiny_views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=1)  # fits 1024 byte-tokens
            batch = [(v, r) for ex, v in zip(items, tiny_views) for r in (ex.chosen, ex.rejected)]
            keep("tiny_rm", bench_rm(lambda: SequenceClassifierRM(path, device="cpu"), batch, 2 * args.chunk,
                                     args.repeats))
    if args.smollm2:
        batch = [(v, r) for ex, v in zip(items[: args.smollm2], views) for r in (ex.chosen, ex.rejected)]
        keep("smollm2_rm", bench_rm(lambda: SequenceClassifierRM("builtin:smollm2-135m-instruct",
                                                                 spec="hf:builtin:smollm2-135m-instruct", device="cpu"),
                                    batch, 2 * args.chunk, args.smollm2_repeats, plain_bytes=False))


if __name__ == "__main__":
    main()
