"""Score the kept `stance` on polis-dev's mirrored test.jsonl, trained on all of train.jsonl or on random
subsets of its people (the sizes users have), beside the co-vote nearest-neighbour reference (#47).

Choose settings with `polis_select.py` (held-out training people); this reads the test file for the kept
defaults only. Per condition: accuracy over pairs and the mean over users, each with a bootstrap 95% CI.

    python benchmarks/polis_test.py ../shared/data/polis-dev [--people 220 --seeds 0,1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

CONDITIONS = ("profile", "wrong-profile", "none")


def measure(rm, test: list, top_k: int) -> dict:
    from prbench.train.protocol import ProtocolConfig, distribution, pair_credits, per_user

    out = {}
    for cond in CONDITIONS:
        credits, users = pair_credits(rm, test, cond, ProtocolConfig(top_k=top_k))
        by_pair = distribution({str(i): c for i, c in enumerate(credits) if c is not None}, seed=0)
        by_user = distribution(per_user(credits, users), seed=0)
        out[cond] = {"pairs": [round(100 * by_pair[k], 1) for k in ("mean", "ci_low", "ci_high")],
                     "users": [round(100 * by_user[k], 1) for k in ("mean", "ci_low", "ci_high")],
                     "invalid": sum(c is None for c in credits)}
    return out


def main() -> None:
    from real_text import CovoteNN

    from prbench.data.pairs import load_pairs
    from prbench.rewards import load_rm
    from prbench.rewards.base import view_top_k
    from prbench.store.cache import Cache
    from prbench.train.stance import StanceConfig, train_stance

    ap = argparse.ArgumentParser()
    ap.add_argument("root", help="polis-dev folder (train.jsonl, test.jsonl)")
    ap.add_argument("--people", type=int, default=0, help="train on a random subset of this many people (0: all)")
    ap.add_argument("--seeds", default="0", help="subset seeds, comma list")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "prbench-real-text-emb.sqlite"))
    args = ap.parse_args()
    train, test = (load_pairs(Path(args.root) / f"{s}.jsonl") for s in ("train", "test"))
    cache = Cache(Path(args.cache), namespace="embeddings")
    for seed in [int(s) for s in args.seeds.split(",")]:
        group = random.Random(seed).sample(train, args.people) if args.people else train
        row: dict = {"people": len(group), "seed": seed if args.people else None}
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            train_stance(group, Path(tmp) / "m", StanceConfig(), cache=cache)
            row["train_s"] = round(time.perf_counter() - t0, 1)
            rm = load_rm(f"stance:{Path(tmp) / 'm'}", encoder_cache=cache)
            row["stance"] = measure(rm, test, view_top_k(rm) or 100)
        row["reference:covote-nn"] = measure(CovoteNN(group), test, 100)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
