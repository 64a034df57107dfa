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
profile votes (`CovoteNN`): no training, a table of how the training file's people voted.
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


class CovoteNN:
    """The nearest-neighbour reference: a statement's closest profile votes by how the training people co-voted.

    From the training file's profiles (`prbench.judgments` signs; `wrote` counts as agree), the
    co-vote similarity of statements a and b is sum_p v_pa v_pb / (n_ab + 5) over the people who
    voted on both (shrunk toward 0 when few did). A response's score is sum_j s_j sim(y, e_j) over
    the `k` profile votes e_j with the largest |sim|. Texts are matched exactly: a statement no
    training person voted on scores 0 (a tie). Like a kNN classifier it memorises statements, so it
    is a reference for a data set whose test statements the training people also voted on.
    """

    def __init__(self, train: list, k: int = 10):
        from collections import defaultdict

        from prbench.judgments import post_evidence

        self.k, votes = k, defaultdict(dict)
        for p in train:
            votes[p.user_id].update({e.text: e.sign for e in post_evidence(p.profile) if e.sign})
            votes[p.user_id].update({p.chosen: 1.0, p.rejected: -1.0})
        self.by_text: dict = defaultdict(dict)
        for user, row in votes.items():
            for text, sign in row.items():
                self.by_text[text][user] = sign
        self.name = self.spec = "reference:covote-nn"

    def sim(self, a: str, b: str) -> float:
        va, vb = self.by_text.get(a, {}), self.by_text.get(b, {})
        both = va.keys() & vb.keys()
        return sum(va[u] * vb[u] for u in both) / (len(both) + 5)

    def score(self, batch: list) -> list:
        from prbench.judgments import post_evidence
        from prbench.rewards.base import Score

        out = []
        for view, response in batch:
            ev = [(e.text, e.sign) for e in post_evidence(view.posts[: view.shown_posts]) if e.sign]
            sims = sorted(((self.sim(response, t), s) for t, s in ev), key=lambda x: -abs(x[0]))[: self.k]
            out.append(Score(float(sum(v * s for v, s in sims))))
        return out


def _one(root: str, variant: str, method: str, cache_path: str, options: dict, top_k: int | None = None) -> dict:
    import resource
    import warnings

    from prbench.cache import Cache
    from prbench.data.pairs import load_pairs
    from prbench.rewards import load_rm
    from prbench.train.methods import METHODS, make_config, spec_for
    from prbench.train.protocol import ProtocolConfig, distribution, pair_credits, per_user

    warnings.simplefilter("ignore")
    train, test = (load_pairs(Path(root) / variant / f"{s}.jsonl") for s in ("train", "test"))
    cache = Cache(Path(cache_path), namespace="embeddings")
    row: dict = {"variant": variant, "method": method, "train_pairs": len(train), "test_pairs": len(test), **options}
    with tempfile.TemporaryDirectory() as tmp:
        if method.startswith(("baseline:", "judge:")):
            rm, row["train_s"] = load_rm(method), 0.0
        elif method == "reference:covote-nn":
            rm, row["train_s"] = CovoteNN(train), 0.0
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
