"""polis-dev's votes rendered as past choices `{prompt, chosen, rejected}` (issue #47, items 3 and 6).

A Polis participant never compared two statements; they voted on each. A past choice here is
"asked the conversation's question, this person agreed with A and disagreed with B": an agreed
statement chosen over a disagreed one. Two renderings, both from polis-dev's own files:

- `OUT/same-split/{train,test}.jsonl`: polis-dev's records unchanged (same people, same judged
  pair, the same mirrored test) except the profile: the person's other agree and disagree votes
  as past choices, each agreed statement paired with a disagreed one (cycling through the shorter
  list, so every vote is kept; statements the person wrote and people with no disagreement, or no
  agreement, in their profile have no choice to show and are dropped from the profile, counted).
  The judged pair's statements are never in the profile (polis-dev guarantees it).
- `OUT/annotator.jsonl`: one row per choice, the annotator-level shape of `prbench data
  personalize` (`participant, question, statement_a, statement_b, winner, conversation`): each
  person's judged pair(s) (a second one that shares a statement with the first is dropped), then
  their other votes paired once each (agreed and disagreed lists shuffled and zipped): a vote is in
  one choice only, so no choice leaks the vote behind another.
  The A/B order of every row is drawn by the seed.

    python scripts/polis_past_choices.py ../shared/data/polis-dev OUT [--seed 0]
    prbench data personalize OUT/annotator.jsonl --by participant --a statement_a --b statement_b \\
        --category conversation --out OUT/personalized
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from prbench.context.judgments import post_evidence
from prbench.data import load_examples


def votes_of(profile: list[Any]) -> tuple[list[str], list[str]]:
    """(agreed, disagreed) statements of a profile, in profile order; `wrote` and plain posts are not votes."""
    agreed, disagreed = [], []
    for e in post_evidence(profile):
        if e.stance in ("agree", "agreed"):
            agreed.append(e.text)
        elif e.stance in ("disagree", "disagreed"):
            disagreed.append(e.text)
    return agreed, disagreed


def same_split(records: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """polis-dev's records with past-choice profiles; and how many records were left with an empty profile."""
    out, empty = [], 0
    for r in records:
        agreed, disagreed = votes_of(r.profile)
        n = max(len(agreed), len(disagreed)) if agreed and disagreed else 0
        profile = [{"id": f"c{i}", "prompt": r.question, "chosen": agreed[i % len(agreed)],
                    "rejected": disagreed[i % len(disagreed)]} for i in range(n)]
        empty += not profile
        out.append({"id": r.id, "user_id": r.user_id, "question": r.question, "profile": profile,
                    "chosen": r.chosen, "rejected": r.rejected, "category": r.category})
    return out, empty


def annotator_rows(records: list[Any], seed: int) -> list[dict[str, Any]]:
    """One row per choice of every participant: their judged pairs, then their other votes paired once each."""
    rng = random.Random(seed)
    people: dict[str, dict[str, Any]] = defaultdict(lambda: {"pairs": [], "votes": {}})
    for r in records:
        me = people[r.user_id]
        me.update(question=r.question, category=r.category)
        me["pairs"].append((r.chosen, r.rejected))
        agreed, disagreed = votes_of(r.profile)
        me["votes"].update({t: 1 for t in agreed} | {t: -1 for t in disagreed})
    rows = []
    for user in sorted(people):
        me = people[user]
        pairs, judged = [], set()
        for pair in me["pairs"]:  # a person's two test records may share a statement: its vote goes in one choice
            if not judged & set(pair):
                pairs.append(pair)
                judged |= set(pair)
        agreed = sorted(t for t, s in me["votes"].items() if s > 0 and t not in judged)
        disagreed = sorted(t for t, s in me["votes"].items() if s < 0 and t not in judged)
        rng.shuffle(agreed)
        rng.shuffle(disagreed)
        for chosen, rejected in pairs + list(zip(agreed, disagreed, strict=False)):
            a_first = rng.random() < 0.5
            rows.append({"participant": user, "question": me["question"],
                         "statement_a": chosen if a_first else rejected,
                         "statement_b": rejected if a_first else chosen,
                         "winner": "a" if a_first else "b", "conversation": me["category"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("polis", type=Path, help="the polis-dev folder (train.jsonl, test.jsonl)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    (args.out / "same-split").mkdir(parents=True, exist_ok=True)
    everyone = []
    for part in ("train", "test"):
        records = load_examples(args.polis / f"{part}.jsonl")
        everyone += records
        rows, empty = same_split(records)
        with (args.out / "same-split" / f"{part}.jsonl").open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        sizes = sorted(len(r["profile"]) for r in rows)
        print(f"same-split/{part}.jsonl: {len(rows)} records, past choices per profile median "
              f"{sizes[len(sizes) // 2]} (max {sizes[-1]}), {empty} with none (no agree or no disagree vote)")
    rows = annotator_rows(everyone, args.seed)
    with (args.out / "annotator.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(f"annotator.jsonl: {len(rows)} choices of {len({r['participant'] for r in rows})} participants")


if __name__ == "__main__":
    main()
