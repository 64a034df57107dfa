"""What `prbench train` (no method named) recommends on the sizes users have, and how it does on new people (#47).

For each subset size and subset seed: a random N-person subset of polis-dev's `train.jsonl` (people drawn
by `random.Random(f"{size}:{seed}")`, all their pairs kept); the recommendation by cross-validation over
those people (`prbench.train.recommend.recommend`, the defaults of `prbench train`, CV seed = subset seed);
then every candidate and the `covote-nn` reference trained on the whole subset (what `prbench train` does
for the chosen one: refit on all pairs) and scored on polis-dev's mirrored `test.jsonl` (other people; a
scorer that ignores the person gets exactly 50%) under `profile` and `wrong-profile`, on each model's own
views (`view_top_k`, as `prbench eval`): accuracy per pair and mean over people, bootstrap 95% CIs.
The naive baseline is in the same rows: the cheaper candidate (`style`, what the old rule kept) and the
reference that trains nothing. One JSON line per subset to stdout (and --out); progress to stderr.

    PRBENCH_THREADS=1 nice python benchmarks/recommend_subsets.py ../shared/data/polis-dev \\
        --sizes 220 --seeds 0,1,2,3,4 --out benchmarks/results_recommend_subsets.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path


def _score(rm, test, condition: str) -> dict:
    import numpy as np

    from prbench.rewards.base import DEFAULT_TOP_K, view_top_k
    from prbench.stats import metrics
    from prbench.train.protocol import ProtocolConfig, distribution, pair_credits, per_user

    cfg = ProtocolConfig(condition=condition, top_k=view_top_k(rm) or DEFAULT_TOP_K)
    credits, users = pair_credits(rm, test, condition, cfg)
    valid = np.array([c for c in credits if c is not None])
    low, high = metrics.bootstrap_ci(valid, seed=0)
    people = distribution(per_user(credits, users), seed=0)
    return {"pairs": [round(100 * float(valid.mean()), 1), round(100 * low, 1), round(100 * high, 1)],
            "people": [round(100 * people[k], 1) for k in ("mean", "ci_low", "ci_high")],
            "invalid": len(credits) - int(valid.size), "top_k": cfg.top_k}


def one(train, test, size: int, seed: int, cache) -> dict:
    from prbench.rewards import load_rm
    from prbench.train.methods import METHODS, _rm_options, make_config, options_for, spec_for
    from prbench.train.recommend import CVSettings, recommend

    people = sorted({p.user_id for p in train})
    random.Random(f"{size}:{seed}").shuffle(people)
    keep = set(people[:size])
    sub = [p for p in train if p.user_id in keep]
    t0 = time.perf_counter()
    rec = recommend(sub, None, {"seed": seed}, settings=CVSettings(seed=seed), cache=cache,
                    progress=lambda line: print(f"{size}/{seed} {line}", file=sys.stderr, flush=True))
    row: dict = {"size": size, "seed": seed, "pairs": len(sub), "recommended": rec.method, "why": rec.why,
                 "warning": rec.warning, "cv_seconds": round(time.perf_counter() - t0, 1), "folds": rec.folds,
                 "cv": {c.method: {"mean": round(100 * (c.mean or 0), 1), "ci": [round(100 * (c.ci_low or 0), 1),
                                                                                 round(100 * (c.ci_high or 0), 1)],
                                   "own_profile": round(100 * (c.profile_mean or 0), 1),
                                   "wrong_profile": round(100 * (c.wrong_mean or 0), 1),
                                   "fold_sd": None if c.fold_sd is None else round(100 * c.fold_sd, 1),
                                   "p_best": c.p_best, "train_s": round(c.train_seconds, 1)}
                        for c in rec.candidates + rec.references},
                 "test": {}}
    print(f"{size}/{seed}: recommended {rec.method} ({rec.why})", file=sys.stderr, flush=True)
    for c in rec.candidates + rec.references:
        name = c.method
        with tempfile.TemporaryDirectory() as tmp:
            fn, _ = METHODS[name].load()
            start = time.perf_counter()
            fn(sub, Path(tmp) / "m", make_config(name, options_for(name, {"seed": seed})), cache=cache)
            seconds = round(time.perf_counter() - start, 1)
            rm = load_rm(spec_for(name, Path(tmp) / "m"), **_rm_options(name, cache))
            row["test"][name] = {"train_s": seconds, **{cond: _score(rm, test, cond)
                                                        for cond in ("profile", "wrong-profile")}}
        print(f"{size}/{seed} {name}: test {row['test'][name]}", file=sys.stderr, flush=True)
    row["recommended_test"] = row["test"][rec.method]["profile"]
    return row


def table(path: str) -> str:
    """The markdown rows of RESULTS_methods.md from the JSON lines of a run."""
    head = ("| people | seed | recommended (CV: stance / style / covote-nn, P(stance best)) | recommended on test, "
            "pairs [95% CI] | per person | wrong-profile (pairs) | style on test (pairs) | covote-nn on test (pairs) "
            "| CV s |")
    out = [head, "|---|---|---|---|---|---|---|---|---|"]
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        cv, test, rec = r["cv"], r["test"], r["recommended"]

        def ci(v: list) -> str:
            return f"{v[0]} [{v[1]}, {v[2]}]"

        out.append(f"| {r['size']} | {r['seed']} | **{rec}** ({cv['stance']['mean']} / {cv['style']['mean']} / "
                   f"{cv['covote-nn']['mean']}, {cv['stance']['p_best']:.2f}) | **{ci(test[rec]['profile']['pairs'])}** | "
                   f"{ci(test[rec]['profile']['people'])} | {test[rec]['wrong-profile']['pairs'][0]} | "
                   f"{test['style']['profile']['pairs'][0]} | {test['covote-nn']['profile']['pairs'][0]} | "
                   f"{r['cv_seconds']:.0f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", help="polis-dev folder (train.jsonl, test.jsonl); with --table, the JSON lines file")
    ap.add_argument("--table", action="store_true", help="print the markdown table of a run's JSON lines")
    ap.add_argument("--sizes", default="220")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "prbench-real-text-emb.sqlite"))
    ap.add_argument("--out", default=None, help="also append each JSON line here")
    args = ap.parse_args()
    if args.table:
        print(table(args.root))
        return
    warnings.simplefilter("ignore")
    from prbench.data.pairs import load_pairs
    from prbench.store.cache import Cache

    train, test = (load_pairs(Path(args.root) / f"{s}.jsonl") for s in ("train", "test"))
    cache = Cache(Path(args.cache), namespace="embeddings")
    for size in map(int, args.sizes.split(",")):
        for seed in map(int, args.seeds.split(",")):
            line = json.dumps(one(train, test, size, seed, cache))
            print(line, flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")


if __name__ == "__main__":
    main()
