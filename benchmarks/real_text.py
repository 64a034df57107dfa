"""Every personalized-RM method on real per-person data: unseen users of the DSP persona splits, polis-dev.

Data: `scripts/build_dsp_splits.py` output (prbench.data.dsp_personas; DSP is CC BY-NC 4.0, not
shipped): train on OUT/<variant>/train.jsonl (32 users x 12 pairs), score the 20 unseen users of
OUT/<variant>/test.jsonl (unseen questions, 10 pairs each) under profile, wrong-profile and none;
accuracy = mean over users (ties 0.5; pairs with an invalid score left out, and counted) with a
bootstrap 95% CI over users. Each method runs in a
fresh subprocess (peak RSS its own); train time is wall-clock of the training call, MiniLM
embeddings from a shared disk cache after the first method (so encoding is not in later times).
Progress (training done, each condition's accuracy) goes to stderr as it happens; the row to stdout.

    python scripts/build_dsp_splits.py ../shared/data/dsp/domain_specific_preference.test.json --out /tmp/dsp
    python benchmarks/real_text.py /tmp/dsp --variants persona,mixed,short --methods style,lore,baseline:lexical

Any ROOT/<variant>/{train,test}.jsonl works the same way: polis-dev (real Polis votes; the test
file is mirrored, so a scorer that ignores the person gets 50%) is `ROOT=../shared/data
--variants polis-dev`. `reference:covote-nn` is the nearest-neighbour rule over the person's own
judgments (`prbench.train.covote`, the method `covote-nn`): no training, a table of how the training
file's people judged each text (votes, stances, past choices).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONDITIONS = ("profile", "wrong-profile", "none")


def _one(root: str, variant: str, method: str, cache_path: str, options: dict, top_k: int | None = None) -> dict:
    import resource
    import warnings

    from prbench.data.pairs import load_pairs
    from prbench.rewards import load_rm
    from prbench.store.cache import Cache
    from prbench.train.methods import METHODS, make_config, spec_for
    from prbench.train.protocol import ProtocolConfig, distribution, pair_credits, per_user

    warnings.simplefilter("ignore")
    train, test = (load_pairs(Path(root) / variant / f"{s}.jsonl") for s in ("train", "test"))
    cache = Cache(Path(cache_path), namespace="embeddings")
    row: dict = {"variant": variant, "method": method, "train_pairs": len(train), "test_pairs": len(test), **options}
    with tempfile.TemporaryDirectory() as tmp:
        if method.startswith(("baseline:", "judge:")):
            rm, row["train_s"] = load_rm(method), 0.0
        elif method == "reference:covote-nn":  # the package's rule (`prbench.train.covote`), its folder a table
            from prbench.train.covote import CovoteConfig, train_covote

            t0 = time.perf_counter()
            train_covote(train, Path(tmp) / "m", CovoteConfig(top_k=top_k or CovoteConfig().top_k))
            rm, row["train_s"] = load_rm(f"covote-nn:{Path(tmp) / 'm'}"), round(time.perf_counter() - t0, 1)
        else:
            fn, _ = METHODS[method].load()
            t0 = time.perf_counter()
            fn(train, Path(tmp) / "m", make_config(method, options), cache=cache)
            row["train_s"] = round(time.perf_counter() - t0, 1)
            print(f"{variant} {method}: trained in {row['train_s']} s", file=sys.stderr, flush=True)
            extra = {"device": "cpu"} if METHODS[method].spec == "finetune" else {"encoder_cache": cache}
            rm = load_rm(spec_for(method, Path(tmp) / "m"), **extra)
        from prbench.rewards.base import DEFAULT_TOP_K, view_top_k

        top_k = top_k or view_top_k(rm) or DEFAULT_TOP_K  # as `prbench eval`: the folder's own view unless given
        cfg = ProtocolConfig(top_k=top_k)
        row["top_k"] = top_k
        for cond in CONDITIONS:
            credits, users = pair_credits(rm, test, cond, cfg)
            d = distribution(per_user(credits, users), seed=0)
            row[cond] = [round(100 * d[k], 1) for k in ("mean", "ci_low", "ci_high")]
            row[f"{cond}_ties"] = sum(c == 0.5 for c in credits)
            row[f"{cond}_invalid"] = sum(c is None for c in credits)
            print(f"{variant} {method}: {cond} {row[cond]}, ties {row[f'{cond}_ties']}, "
                  f"invalid {row[f'{cond}_invalid']}", file=sys.stderr, flush=True)
    row["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--variants", default="persona")
    ap.add_argument("--methods", default="style,baseline:lexical,baseline:embedding,lore,pref,gpo,vpl,pal,context-bt")
    ap.add_argument("--options", default="{}", help="JSON options for every trained method")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "prbench-real-text-emb.sqlite"))
    ap.add_argument("--top-k", type=int, default=0, help="Profile posts each view shows (eval's --top-k; 0: the "
                                                      "model's own view, else 10, as eval).")
    ap.add_argument("--one", nargs=2, metavar=("VARIANT", "METHOD"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.root, *args.one, args.cache, json.loads(args.options), args.top_k)))
        return
    env = {**os.environ, "PRBENCH_THREADS": os.environ.get("PRBENCH_THREADS", "1")}
    for variant in args.variants.split(","):
        for method in args.methods.split(","):
            cmd = [sys.executable, __file__, args.root, "--one", variant, method, "--cache", args.cache,
                   "--options", args.options, "--top-k", str(args.top_k)]
            res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, check=False)
            out = res.stdout.strip().splitlines()
            print(out[-1] if res.returncode == 0 and out else json.dumps(
                {"variant": variant, "method": method, "error": f"exit {res.returncode}: see stderr"}), flush=True)


if __name__ == "__main__":
    main()
