"""Choose stance's co-vote settings on held-out *training* people of polis-dev (never its test file).

20% of train.jsonl's people (by a hash of their id) are held out; from their votes (profile and
pair) mirrored records are built as test.jsonl is: a statement pair one held-out person agreed /
rejected and another the other way round, the evidence all their other votes. `stance` is trained on
the other 80%; the script prints pair accuracy of the projection alone, the co-vote factors alone
(rank x l2 grid), their sum at several factor weights, and the co-vote nearest-neighbour reference
(`prbench.train.covote`, the `covote-nn` method's table), every one on the person's whole profile.

    python benchmarks/polis_select.py ../shared/data/polis-dev [--cache /tmp/emb.sqlite]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

RANKS, L2S, WEIGHTS = (8, 16, 32, 64), (0.3, 1.0, 3.0), (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 100.0)


def held_out(user: str, seed: int = 0) -> bool:
    return int(hashlib.sha256(f"{seed}:{user}".encode()).hexdigest(), 16) % 5 == 0


def mirrored(votes: dict[str, dict[str, float]], seed: int = 0, cap: int = 3000) -> list[tuple]:
    """(user, chosen, rejected, evidence) in mirrored couples: one statement pair per couple, at most `cap` records."""
    rng = random.Random(seed)
    by_pair: dict[tuple[str, str], list[str]] = defaultdict(list)  # (agreed, rejected) -> who voted so
    for user, row in votes.items():
        for a in (t for t, s in row.items() if s > 0):
            for b in (t for t, s in row.items() if s < 0):
                by_pair[(a, b)].append(user)
    keys = sorted(by_pair)
    rng.shuffle(keys)
    out, used = [], set()
    for a, b in keys:
        if (b, a) not in by_pair or frozenset((a, b)) in used:
            continue
        used.add(frozenset((a, b)))
        for user, c, r in ((rng.choice(by_pair[(a, b)]), a, b), (rng.choice(by_pair[(b, a)]), b, a)):
            out.append((user, c, r, [(t, s) for t, s in votes[user].items() if t not in (a, b)]))
        if len(out) >= cap:
            break
    return out


def accuracy(margins: np.ndarray) -> float:
    return round(100 * float(np.mean((margins > 0) + 0.5 * (margins == 0))), 1)


def parts(rm, records: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Per record, the chosen-minus-rejected margin of the projection and of the co-vote readout."""
    import torch

    from prbench.rewards.stance import pad_evidence

    proj, votes = [], []
    for i in range(0, len(records), 256):
        chunk = records[i:i + 256]
        rows = [ev for *_, ev in chunk]
        texts = list(dict.fromkeys([t for r in rows for t, _ in r] + [x for c in chunk for x in c[1:3]]))
        table, index = rm._tensor(texts), {t: j for j, t in enumerate(texts)}
        ev, sign, mask = pad_evidence(rows, table, index)
        c, r = table[[index[x[1]] for x in chunk]], table[[index[x[2]] for x in chunk]]
        with torch.no_grad():
            proj += (rm.model.reward(c, ev, sign, mask, votes=False) - rm.model.reward(r, ev, sign, mask, votes=False)).tolist()
            votes += (rm.model.covote(c, ev, sign, mask) - rm.model.covote(r, ev, sign, mask)).tolist()
    return np.array(proj), np.array(votes)


def main() -> None:
    import torch

    from prbench.cache import Cache
    from prbench.data.pairs import load_pairs
    from prbench.judgments import post_evidence
    from prbench.rewards import load_rm
    from prbench.rewards.stance import covote_factors
    from prbench.train.covote import CovoteTable
    from prbench.train.stance import StanceConfig, judgments_by_user, train_stance

    ap = argparse.ArgumentParser()
    ap.add_argument("root", help="polis-dev folder (train.jsonl is all this reads)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "prbench-real-text-emb.sqlite"))
    args = ap.parse_args()
    train = load_pairs(Path(args.root) / "train.jsonl")
    fit = [p for p in train if not held_out(p.user_id)]
    hold = [p for p in train if held_out(p.user_id)]
    votes = {p.user_id: {**{e.text: e.sign for e in post_evidence(p.profile) if e.sign}, p.chosen: 1.0,
                         p.rejected: -1.0} for p in hold}
    records = mirrored(votes)
    print(f"fit on {len(fit)} people; {len(records)} mirrored records of {len({r[0] for r in records})} held-out people",
          flush=True)
    cache = Cache(Path(args.cache), namespace="embeddings")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train_stance(fit, Path(tmp) / "m", StanceConfig(), cache=cache)
        print(f"stance trained in {time.perf_counter() - t0:.0f} s", flush=True)
        rm = load_rm(f"stance:{Path(tmp) / 'm'}", encoder_cache=cache)
        proj, _ = parts(rm, records)
        print("projection alone", accuracy(proj))
        people = list(judgments_by_user(fit).values())
        kept = None
        for rank in RANKS:
            texts, factors = covote_factors(people, rank)
            rm.model.vote_keys, rm.model.vote_factors = torch.from_numpy(rm.embed(texts)), torch.from_numpy(factors)
            for l2 in L2S:
                rm.model.votes_l2 = l2
                _, cov = parts(rm, records)
                print(f"factors alone, rank {rank}, l2 {l2}:", accuracy(cov), flush=True)
                if (rank, l2) == (StanceConfig().votes_rank, StanceConfig().votes_l2):
                    kept = cov
        if kept is not None:
            for w in WEIGHTS:
                print(f"projection + factors (the defaults' rank and l2), weight {w}:", accuracy(proj + w * kept))
    from prbench.train.covote import CovoteConfig

    table, shrink = CovoteTable.from_pairs(fit), CovoteConfig().shrink
    for k in (10, 5, 20):
        scores = [table.score(c, _keyed(ev), k, shrink) - table.score(r, _keyed(ev), k, shrink)
                  for _, c, r, ev in records]
        print(f"reference co-vote nearest neighbour, {k} nearest votes:", accuracy(np.array(scores)))


def _keyed(evidence: list[tuple[str, float]]) -> list[tuple[str, float]]:
    from prbench.train.covote import text_key

    return [(text_key(t), s) for t, s in evidence]


if __name__ == "__main__":
    main()
