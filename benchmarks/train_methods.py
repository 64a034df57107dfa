"""Training time and peak memory per personalized-RM method, at 400 and 4,000 pairs; and the held-out check.

Data: `synth_personas` writing-persona users (12 pairs per user: 400 pairs = 34 users, 4,000
pairs = 334 users), built-in MiniLM features. Each method trains in a fresh subprocess (so
peak RSS is its own: `resource.getrusage(RUSAGE_SELF).ru_maxrss`), on CPU, one torch thread,
embeddings computed inside the timed region (no warm cache). Time is wall-clock of the
training call only (no protocol). The naive baseline beside them: `baseline:lexical`, which
trains nothing (its time is the scoring of the held-out pairs).

Held-out check (`--check`): 52 persona users, 24 questions each; the protocol splits 25% of the
users off (unseen) and half the topics (question-disjoint); unseen-user accuracy at k = 0
under `profile` for each method, beside `baseline:lexical` and `baseline:embedding`.

    python benchmarks/train_methods.py --sizes 400,4000 --methods lore,vpl,pal,context-bt,finetune
    python benchmarks/train_methods.py --check
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


def _one(method: str, n_pairs: int, finetune_steps: int) -> dict:
    import resource

    from prbench.data.pairs import pairs_from_examples
    from prbench.data.synth_personas import synth_persona_examples
    from prbench.train.methods import METHODS, make_config

    users = -(-n_pairs // 12)
    pairs = pairs_from_examples(synth_persona_examples(users, 12, seed=11))[:n_pairs]
    options = {"max_steps": finetune_steps} if method == "finetune" and finetune_steps > 0 else {}
    fn, _ = METHODS[method].load()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        fn(pairs, Path(tmp) / "m", make_config(method, options))
        wall = time.perf_counter() - t0
    return {"method": method, "pairs": len(pairs), "users": users, "train_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1), **options}


def _check(methods: list[str]) -> list[dict]:
    import warnings

    from prbench.data.pairs import pairs_from_examples
    from prbench.data.synth_personas import question_group, synth_persona_examples
    from prbench.rewards import load_rm
    from prbench.train.methods import METHODS, make_config, spec_for
    from prbench.train.protocol import ProtocolConfig, headline, run_protocol, split_protocol

    warnings.simplefilter("ignore")
    pairs = pairs_from_examples(synth_persona_examples(52, 24, seed=0))
    cfg = ProtocolConfig(ks=(0, 8), draws=3)
    split = split_protocol(pairs, cfg, item_key=lambda p: question_group(p.prompt))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            options = {"max_steps": 60} if method == "finetune" else {}
            fn, _ = METHODS[method].load()
            fn(split.train, Path(tmp) / method, make_config(method, options))
            rm = load_rm(spec_for(method, Path(tmp) / method), **({"device": "cpu"} if method == "finetune" else {}))
            rows.append({"method": method, "split": split.info, **headline(run_protocol(rm, split, cfg)).model_dump()})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="400,4000")
    ap.add_argument("--methods", default="lore,vpl,pal,context-bt,finetune")
    ap.add_argument("--finetune-steps", type=int, default=0, help="cap TRL steps (0: the default epochs)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("METHOD", "PAIRS"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one[0], int(args.one[1]), args.finetune_steps)))
        return
    if args.check:
        _check(args.methods.split(","))
        return
    env = {**os.environ, "PRBENCH_THREADS": "1"}
    for n in [int(x) for x in args.sizes.split(",")]:
        for method in args.methods.split(","):
            cmd = [sys.executable, __file__, "--one", method, str(n), "--finetune-steps", str(args.finetune_steps)]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            line = res.stdout.strip().splitlines()[-1] if res.returncode == 0 and res.stdout.strip() else \
                json.dumps({"method": method, "pairs": n, "error": res.stderr.strip().splitlines()[-1:]})
            print(line, flush=True)


if __name__ == "__main__":
    main()
