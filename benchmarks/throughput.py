"""Pointwise scoring throughput: prbench versus the naive loop of the original evaluation scripts.

Measured in one run, same model, same data, same machine:
- the naive reference loop (written here): batches of 8 in file order, chat template rendered
  to text and re-tokenized, padding to the longest in the batch, no prefix sharing, the
  model's own pooling;
- prbench's `SequenceClassifierRM`: one-step templating, length-sorted token-budget batches,
  shared-prefix scoring from the KV cache.
Reported: pairs/s and their ratio, padding efficiency (real / processed tokens), achieved
model FLOP/s against the machine's matmul peak measured here in the same dtype, the cache-hit
re-run time, peak memory over benchmark size, and grader calls saved by Best-of-N dedupe.

    python benchmarks/throughput.py            # about 8 minutes on an idle 2-core CPU
    python benchmarks/throughput.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from prbench.context.conditions import build_views
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.rewards.classifier import SequenceClassifierRM

HERE = Path(__file__).resolve().parent


def matmul_peak(dtype: torch.dtype = torch.float32, sizes: tuple[int, ...] = (1024, 1536, 2048), reps: int = 8) -> float:
    """Best observed FLOP/s of square matmuls in `dtype`: the machine's practical peak.

    A shared VM's clock and steal time drift, so main() measures it at the start and at the end
    of the run and divides by the larger (the conservative choice for "share of peak").
    """
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def model_flops_per_token(model: torch.nn.Module) -> float:
    """2 x non-embedding parameters: the matmul work of one token's forward pass."""
    emb = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
    return 2.0 * (sum(p.numel() for p in model.parameters()) - emb)


def naive_scores(rm: SequenceClassifierRM, items: list[tuple[str, str]], batch: int = 8) -> tuple[list[float], dict]:
    """The reference loop: file order, render-then-retokenize, pad to longest, model pooling."""
    tok, model = rm.tokenizer, rm.model
    tok.padding_side = "right"
    out, real, processed = [], 0, 0
    for i in range(0, len(items), batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                                         tokenize=False) for p, r in items[i : i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True)
        real += int(enc["attention_mask"].sum())
        processed += int(enc["attention_mask"].numel())
        with torch.no_grad():
            out.extend(model(**enc).logits[:, 0].float().tolist())
    return out, {"tokens": real, "padded_tokens": processed}


def make_long_profiles(path: Path, n: int, posts: int = 300, seed: int = 0) -> Path:
    """n sample items whose users get `posts` posts of heavy-tailed length (LaMP-QA-like profiles).

    A post joins k of the user's sample posts (~19 words each): k = round(v_user * (1 + floor(L))),
    L ~ lognormal(1.0, 0.8) per post and v_user ~ lognormal(0, 0.6) per user (some people write
    one-liners, others pages), k clipped to 1..16: median post ~60 words, long tail to ~300.
    Written once; the same file feeds both loops.
    """
    import random

    rng = random.Random(seed)
    verbosity: dict[str, float] = {}
    with path.open("w", encoding="utf-8") as fh:
        for i, ex in enumerate(load_examples("sample", limit=n)):
            rec = ex.model_dump()
            v = verbosity.setdefault(ex.user_id, rng.lognormvariate(0.0, 0.6))
            own = rec["profile"]
            rec["profile"] = []
            for j in range(posts):
                k = min(16, max(1, round(v * (1 + int(rng.lognormvariate(1.0, 0.8))))))
                rec["profile"].append({"id": f"{i}-{j}", "category": own[j % len(own)]["category"],
                                       "text": " ".join(rng.choice(own)["text"] for _ in range(k))})
            fh.write(json.dumps(rec) + "\n")
    return path


def bench_scoring(model: str, data: str, condition: str, limit: int, repeats: int = 1) -> dict:
    """Both loops on the same pairs, alternating `repeats` times; the median time of each side counts.

    Peak fractions are filled in by main() once the peak is known (`*_flops_per_s` here).
    """
    items = load_examples(data, limit=limit)
    views = build_views(items, condition, retriever=load_retriever("bm25"))
    pairs = [(v, r) for ex, v in zip(items, views) for r in (ex.chosen, ex.rejected)]
    rm = SequenceClassifierRM(model, batch_size=8)
    flops_tok = model_flops_per_token(rm.model)
    rm.score(pairs[:2])  # warm-up
    fast_times, slow_times = [], []
    for _ in range(repeats):
        rm.counts.update(tokens=0, padded_tokens=0, prefix_tokens_saved=0)
        t = time.perf_counter()
        fast = [s.value for s in rm.score(pairs)]
        fast_times.append(time.perf_counter() - t)
        fast_counts = dict(rm.counts)
        t = time.perf_counter()
        slow, slow_counts = naive_scores(rm, [(v.prompt(), r) for v, r in pairs])
        slow_times.append(time.perf_counter() - t)
    t_fast, t_slow = statistics.median(fast_times), statistics.median(slow_times)
    diff = max(abs(a - b) for a, b in zip(fast, slow))
    n_pairs = len(items)
    return {
        "model": model, "data": "sample" if data == "sample" else "long-profiles", "condition": condition,
        "pairs": n_pairs, "mean_tokens_per_response": round(slow_counts["tokens"] / len(pairs)),
        "naive_pairs_per_s": round(n_pairs / t_slow, 3), "prbench_pairs_per_s": round(n_pairs / t_fast, 3),
        "speedup": round(t_slow / t_fast, 2),
        "naive_padding_eff": round(slow_counts["tokens"] / slow_counts["padded_tokens"], 3),
        "prbench_padding_eff": round(fast_counts["tokens"] / fast_counts["padded_tokens"], 3),
        "naive_flops_per_s": flops_tok * slow_counts["padded_tokens"] / t_slow,
        "prbench_flops_per_s": flops_tok * fast_counts["padded_tokens"] / t_fast,
        "repeats": repeats, "speedup_per_repeat": [round(a / b, 2) for a, b in zip(slow_times, fast_times)],
        "prefix_tokens_saved": fast_counts["prefix_tokens_saved"],
        "max_abs_score_diff_vs_naive": round(diff, 5),
    }


def bench_rerun(tmp: Path) -> dict:
    from prbench import evaluate

    env_cache = tmp / "cache"
    os.environ["PRBENCH_CACHE_DIR"] = str(env_cache)
    t = time.perf_counter()
    evaluate("baseline:embedding", "sample", "profile", out=tmp / "runs")
    first = time.perf_counter() - t
    t = time.perf_counter()
    evaluate("baseline:embedding", "sample", "profile", out=tmp / "runs")
    second = time.perf_counter() - t
    t = time.perf_counter()
    evaluate("baseline:embedding", "sample", "profile", out=tmp / "runs2")  # new folder, warm score cache
    cached = time.perf_counter() - t
    return {"first_run_s": round(first, 2), "rerun_same_folder_s": round(second, 3),
            "rerun_new_folder_cache_hits_s": round(cached, 3), "rerun_fraction": round(second / first, 4)}


# Peak RSS is read from /proc/self/status (VmHWM): getrusage's ru_maxrss survives exec on
# Linux and would report the parent's peak (the benchmark process holds SmolLM2 by then).
MEMORY_CHILD = """
import sys
from prbench import evaluate
evaluate("baseline:length", sys.argv[1], "profile", out=sys.argv[2], top_k=10)
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def make_big(path: Path, n: int, posts: int = 300) -> None:
    """A benchmark of n items whose users each have `posts` profile posts (LaMP-QA-sized)."""
    base = load_examples("sample")
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            ex = base[i % len(base)].model_dump()
            ex["id"] = f"big-{i:05d}"
            ex["profile"] = [{"id": f"{i}-{j}", "category": p["category"], "text": f"{p['text']} ({j})"}
                             for j, p in enumerate(ex["profile"] * (posts // len(ex["profile"]) + 1))][:posts]
            fh.write(json.dumps(ex) + "\n")


def bench_memory(tmp: Path, sizes: list[int]) -> list[dict]:
    out = []
    for n in sizes:
        data = tmp / f"big-{n}.jsonl"
        make_big(data, n)
        res = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(data), str(tmp / f"mem-{n}")],
                             capture_output=True, text=True, check=True)
        out.append({"items": n, "file_mb": round(data.stat().st_size / 2**20, 1),
                    "peak_rss_mb": round(int(res.stdout.strip().splitlines()[-1]) / 1024, 1)})
    return out


def _grading_reply(body: dict) -> str:
    """A valid rubric grade for the loopback grader: one 0-2 score per aspect, from the text's hash."""
    import hashlib
    import re

    prompt = body["messages"][-1]["content"]
    n = int(re.search(r"expects \((\d+) aspects\)", prompt).group(1))
    h = hashlib.sha256(prompt.encode()).digest()
    return json.dumps({"grades": [{"aspect": j + 1, "score": h[j] % 3} for j in range(n)]})


def bench_dedupe(tmp: Path, items: int = 8, n: int = 8) -> dict:
    """Grader requests of a real Best-of-N run, counted by the grading server, against the naive count.

    SmolLM2 draws n answers (temperature 1.0, 32 new tokens, question only) for `items` sample items; five
    baselines pick at k in 1, 2, 4, 8; an LLM rubric grader over a real OpenAI-compatible HTTP
    server on 127.0.0.1 (scripted grades: only the number of requests matters here) grades.
    Naive = RMs x k values x items (each RM's pick graded at each k, as the original scripts do);
    prbench grades each distinct sample once, which also yields exact expected best-of-k and
    the oracle curve.
    """
    from prbench.capabilities.bon.driver import best_of_n
    from prbench.downstream.grader import load_grader
    from prbench.capabilities.sample.driver import sample_policy
    from prbench.store.cache import NullCache
    from prbench.testing.openai_server import serve

    t = time.perf_counter()
    ss = sample_policy("builtin:smollm2-135m-instruct", "sample", tmp / "samples", n=n, limit=items,
                       condition="none", max_new_tokens=32)
    sample_s = time.perf_counter() - t
    rms = ["baseline:length", "baseline:short", "baseline:random", "baseline:lexical", "baseline:embedding"]
    os.environ.setdefault("PRBENCH_BENCH_GRADER_KEY", "loopback")
    with serve(_grading_reply) as server:
        grader = load_grader("openai:grader", cache=NullCache(),
                             engine_options={"base_url": server.base_url, "api_key_env": "PRBENCH_BENCH_GRADER_KEY"})
        res = best_of_n(ss, rms, grader, condition="profile", ks=[1, 2, 4, 8], n_boot=200)
        requests = len(server.requests)
    distinct = sum(len(set(texts)) for texts in ss.samples.values())
    return {"items": items, "n": n, "rms": len(rms), "ks": [1, 2, 4, 8],
            "naive_calls": res.summary["grader_calls"]["naive"], "prbench_calls": requests,
            "distinct_samples": distinct, "sample_s": round(sample_s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()  # the random score head's load report is expected
    peak_start = matmul_peak()
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    print(json.dumps(machine))
    rows = []
    smol = "builtin:smollm2-135m-instruct"
    reps = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as d:
        from prbench.testing.tiny import make_tiny_seq_classifier

        tiny = str(make_tiny_seq_classifier(Path(d) / "tiny", hidden_size=64))
        long = str(make_long_profiles(Path(d) / "long.jsonl", 16))
        plan = [(smol, "sample", "none", 4 if args.quick else 16, reps),
                (smol, "sample", "profile", 2 if args.quick else 8, reps),
                (smol, long, "profile", 2 if args.quick else 16, 1),  # ~3.5 min a repeat: once
                (tiny, "sample", "none", 63, reps), (tiny, "sample", "profile", 63, reps)]
        for model, data, cond, limit, repeats in plan:
            row = bench_scoring(model, data, cond, limit, repeats)
            row["model"] = "tiny-random-llama" if model == tiny else model
            rows.append(row)
            print(json.dumps(row))
        rerun = bench_rerun(Path(d))
        print(json.dumps(rerun))
        memory = bench_memory(Path(d), [300, 1000] if args.quick else [500, 1500, 3000])
        print(json.dumps(memory))
        dedupe = bench_dedupe(Path(d), items=2 if args.quick else 8)
        print(json.dumps(dedupe))
    peak_end = matmul_peak()
    peak = max(peak_start, peak_end)
    machine.update(fp32_matmul_peak_gflops_start=round(peak_start / 1e9, 1),
                   fp32_matmul_peak_gflops_end=round(peak_end / 1e9, 1), fp32_matmul_peak_gflops=round(peak / 1e9, 1))
    for row in rows:
        for side in ("naive", "prbench"):
            row[f"{side}_peak_frac"] = round(row.pop(f"{side}_flops_per_s") / peak, 3)
    print(json.dumps(machine))
    result = {"machine": machine, "scoring": rows, "rerun": rerun, "memory": memory, "bon_dedupe": dedupe,
              "max_rss_mb_driver": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print_table(result)
    print(f"wrote {args.out}")


def print_table(result: dict) -> None:
    """The scoring rows as the markdown table of RESULTS.md, then the other measurements."""
    print(f"\nfp32 matmul peak {result['machine']['fp32_matmul_peak_gflops']} GFLOP/s\n")
    print("| model | data | condition | pairs | naive pairs/s | prbench pairs/s | speedup | padding eff. naive / prbench "
          "| share of peak naive / prbench |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in result["scoring"]:
        print(f"| {r['model']} | {r['data']} | {r['condition']} | {r['pairs']} | {r['naive_pairs_per_s']} | "
              f"{r['prbench_pairs_per_s']} | {r['speedup']}x | {r['naive_padding_eff']} / {r['prbench_padding_eff']} | "
              f"{r['naive_peak_frac']} / {r['prbench_peak_frac']} |")
    rr = result["rerun"]
    print(f"\nre-run: {rr['rerun_same_folder_s']} s vs first run {rr['first_run_s']} s ({100 * rr['rerun_fraction']:.2f}%)")
    print("peak RSS: " + ", ".join(f"{m['items']} items {m['peak_rss_mb']} MB" for m in result["memory"]))
    dd = result["bon_dedupe"]
    print(f"Best-of-N grader calls: {dd['prbench_calls']} (distinct samples {dd['distinct_samples']}) "
          f"vs naive {dd['naive_calls']}")


if __name__ == "__main__":
    main()
