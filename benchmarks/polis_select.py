"""Choose stance's co-vote settings on held-out *training* people of polis-dev (never its test file).

20% of train.jsonl's people (by a hash of their id) are held out; from their votes (profile and
pair) mirrored records are built as test.jsonl is: a statement pair one held-out person agreed /
rejected and another the other way round, the evidence all their other votes. `stance` is trained on
the other 80%; the script prints pair accuracy (and the mean over people) of the projection alone,
the earlier uncentered co-vote readout (ridge fit of the signs on an SVD of the votes, rank 64,
l2 0.3), the centered co-vote kernel alone (rank x prior grid), the projection plus the kernel at
several weights, the co-vote nearest-neighbour reference (`prbench.train.covote`, the `covote-nn` method's table), and
the kernel and the reference fitted on random 220-person subsets of the 80% (the sizes users
have); every one on the person's whole profile.

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

RANKS, PRIORS, WEIGHTS = (64, 256, 10_000), (0.0, 5.0, 20.0), (0.0, 5.0, 10.0, 20.0, 50.0, 200.0)
SUBSETS, SUBSET_PEOPLE = 5, 220


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


def accuracy(margins: np.ndarray, users: list[str] | None = None) -> str:
    """Pair accuracy, and with `users` the mean over people too (ties count half)."""
    credit = (margins > 0) + 0.5 * (margins == 0)
    pairs = f"{100 * float(np.mean(credit)):.1f}"
    if users is None:
        return pairs
    by: dict[str, list[float]] = defaultdict(list)
    for u, c in zip(users, credit):
        by[u].append(float(c))
    return f"{pairs} (per person {100 * float(np.mean([np.mean(v) for v in by.values()])):.1f})"


def uncentered(people: list, records: list[tuple], rank: int = 64, l2: float = 0.3) -> np.ndarray:
    """Margins of the co-vote readout before the centering (2026-12-03): the person's signs ridge-fitted on an
    SVD of the row-normalised, uncentered votes, read at the candidate (exact texts)."""
    texts = list(dict.fromkeys(t for items in people for t, s in items if s))
    index = {t: i for i, t in enumerate(texts)}
    v = np.zeros((len(texts), len(people)))
    for j, items in enumerate(people):
        for t, s in items:
            v[index[t], j] = np.sign(s)
    v /= np.sqrt(np.abs(v).sum(1, keepdims=True))
    u, sv, _ = np.linalg.svd(v, full_matrices=False)
    q = u[:, :rank] * sv[:rank]
    out = []
    for _, c, r, ev in records:
        known = [(index[t], s) for t, s in ev if t in index]
        qe, s = q[[i for i, _ in known]], np.array([s for _, s in known])
        w = np.linalg.solve(qe.T @ qe + l2 * np.eye(q.shape[1]), qe.T @ s)
        out.append(sum(sign * (q[index[t]] @ w) for t, sign in ((c, 1), (r, -1)) if t in index))
    return np.array(out)


def parts(rm, records: list[tuple], projection: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per record, the chosen-minus-rejected margin of the projection (0 when `projection` is False: not computed)
    and of the co-vote readout."""
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
            if projection:
                proj += (rm.model.reward(c, ev, sign, mask, votes=False)
                         - rm.model.reward(r, ev, sign, mask, votes=False)).tolist()
            votes += (rm.model.covote(c, ev, sign, mask) - rm.model.covote(r, ev, sign, mask)).tolist()
    return np.array(proj) if projection else np.zeros(len(votes)), np.array(votes)


def main() -> None:
    import torch

    from prbench.context.judgments import post_evidence
    from prbench.data.pairs import load_pairs
    from prbench.rewards import load_rm
    from prbench.rewards.stance import covote_factors
    from prbench.store.cache import Cache
    from prbench.train.covote import CovoteConfig, CovoteTable
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
    users = [r[0] for r in records]
    print(f"fit on {len(fit)} people; {len(records)} mirrored records of {len(set(users))} held-out people",
          flush=True)
    cache = Cache(Path(args.cache), namespace="embeddings")
    defaults = StanceConfig()
    people = list(judgments_by_user(fit).values())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train_stance(fit, Path(tmp) / "m", defaults, cache=cache)
        print(f"stance trained in {time.perf_counter() - t0:.0f} s", flush=True)
        rm = load_rm(f"stance:{Path(tmp) / 'm'}", encoder_cache=cache)

        def kernel(group: list, rank: int, prior: float) -> np.ndarray:
            texts, factors, means = covote_factors(group, rank, prior)
            rm.model.vote_keys = torch.from_numpy(rm.embed(texts))
            rm.model.vote_factors, rm.model.vote_means = torch.from_numpy(factors), torch.from_numpy(means)
            return parts(rm, records, projection=False)[1]

        proj, _ = parts(rm, records)
        print("projection alone:", accuracy(proj, users))
        print("co-vote readout before (uncentered ridge fit, rank 64, l2 0.3):", accuracy(uncentered(people, records),
                                                                                          users), flush=True)
        for rank in RANKS:
            for prior in PRIORS:
                print(f"centered co-vote kernel alone, rank {rank}, prior {prior}:",
                      accuracy(kernel(people, rank, prior), users), flush=True)
        kept = kernel(people, defaults.votes_rank, defaults.votes_prior)
        for w in WEIGHTS:
            print(f"projection + kernel (rank {defaults.votes_rank}, prior {defaults.votes_prior}), weight {w}:",
                  accuracy(proj + w * kept, users))
        shrink = CovoteConfig().shrink
        for k in (10, 5, 20):
            scores = _reference(CovoteTable.from_pairs(fit), records, k, shrink)
            print(f"reference co-vote nearest neighbour, {k} nearest votes:", accuracy(scores, users))
        for seed in range(SUBSETS):
            group = random.Random(seed).sample(fit, SUBSET_PEOPLE)
            scores = _reference(CovoteTable.from_pairs(group), records, 10, shrink)
            cov = kernel(list(judgments_by_user(group).values()), defaults.votes_rank, defaults.votes_prior)
            print(f"{SUBSET_PEOPLE} people (subset seed {seed}): kernel alone {accuracy(cov, users)}; "
                  f"reference (10 nearest) {accuracy(scores, users)}", flush=True)


def _reference(table, records: list[tuple], k: int, shrink: float) -> np.ndarray:
    """The `covote-nn` rule's margin (chosen minus rejected) on each record, its `k` nearest votes."""
    from prbench.train.covote import text_key

    out = []
    for _, c, r, ev in records:
        keyed = [(text_key(t), s) for t, s in ev]
        out.append(table.score(c, keyed, k, shrink) - table.score(r, keyed, k, shrink))
    return np.array(out)


if __name__ == "__main__":
    main()
