"""A trained SynthesizeMe folder on a sample of a DSP split's unseen users: how many pairs get two readable scores.

Why a sample: with a small local judge each pair costs seconds per condition, and the question
this answers first is whether the judge's replies can be read at all (parse failures are counted,
never guessed). One pair of each of the first `--users` unseen users, the views `prbench eval`
builds (wrong-profile donors drawn from the whole test file, as in `benchmarks/real_text.py`).

    python benchmarks/synthesizeme_sample.py MODEL_DIR /tmp/dsp/persona --users 10
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="a folder written by `prbench train synthesizeme`")
    ap.add_argument("split", help="a DSP split folder holding test.jsonl")
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--conditions", default="none,profile,wrong-profile")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from prbench.data.pairs import load_pairs
    from prbench.rewards import load_rm
    from prbench.train.protocol import ProtocolConfig, pair_credits

    test = load_pairs(Path(args.split) / "test.jsonl")
    first: dict[str, object] = {}
    for p in test:
        first.setdefault(p.user_id, p)
    sample = list(first.values())[: args.users]
    personas = json.loads((Path(args.model) / "personas.json").read_text(encoding="utf-8"))
    print(json.dumps({"trained_users": len(personas),
                      "verification_pairs": sum(v.get("verified_on", 0) for v in personas.values()),
                      "users_with_a_readable_verification": sum(v["verify_accuracy"] is not None
                                                                for v in personas.values())}), flush=True)
    rm = load_rm(f"synthesizeme:{args.model}")
    for cond in args.conditions.split(","):
        t0 = time.perf_counter()
        credits, _ = pair_credits(rm, sample, cond, ProtocolConfig(), pool=test)
        valid = [c for c in credits if c is not None]
        print(json.dumps({"condition": cond, "pairs": len(sample), "valid_pairs": len(valid),
                          "accuracy_on_valid": sum(valid) / len(valid) if valid else None,
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
