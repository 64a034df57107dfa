"""Write the real-text persona development splits (prbench.data.dsp_personas) from a DSP domain file.

    python scripts/build_dsp_splits.py ../shared/data/dsp/domain_specific_preference.test.json --out /tmp/dsp

writes OUT/<variant>/{train,test}.jsonl for the variants persona, mixed and short. The DSP data
is CC BY-NC 4.0: keep the output out of the repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prbench.data import write_examples
from prbench.data.dsp_personas import VARIANTS, build_splits, load_questions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    questions = load_questions(args.source)
    for variant in args.variants.split(","):
        for side, pairs in build_splits(questions, variant, seed=args.seed).items():
            n = write_examples(pairs, Path(args.out) / variant / f"{side}.jsonl")
            print(f"{variant}/{side}: {n} pairs, {len({p.user_id for p in pairs})} users")


if __name__ == "__main__":
    main()
