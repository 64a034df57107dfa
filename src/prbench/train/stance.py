"""Training the stance space (`prbench.rewards.stance`, formula there) in plain torch.

Each training person contributes their signed judgments: the profile's evidence as
`prbench.context.judgments` reads it (agree / wrote +1, disagree -1) and each of their labelled pairs
(chosen +1, rejected -1). An epoch draws `draws` leave-two-out samples per person: one +1 and one
-1 item held out as the pair to order, and a random subset (`min_evidence`..`max_evidence` items)
of the rest as the evidence, the size spread so the model works with the ten posts an eval shows
as with thirty. Bradley-Terry on `scale` x margin, minibatches, Adam. All `members` projections
are trained on the same draws from different random starts (the ensemble of the reward).
A person whose profile holds no -1 item (plain posts) still trains: their labelled pairs' rejected
answers are the -1 items. The co-vote factors (`votes_rank` > 0) are an SVD of the same judgments,
each text's shrunk mean vote taken out (`votes_prior`; the centered kernel of `prbench.rewards.stance`),
computed once after the projection is trained (the projection never sees them: a training person's
own votes are in the factors, so they would only teach it to trust them).
Seconds to a few minutes on CPU for hundreds of people (the frozen encoder runs once per text).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prbench.config import ENCODER_FIELD, MethodView, count, opt
from prbench.context.judgments import post_evidence
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.heads import save_head
from prbench.rewards.pal import torch_threads
from prbench.rewards.stance import READOUTS, build_stance, covote_factors, pad_evidence, signed
from prbench.store.cache import Cache
from prbench.train import TrainResult, pair_accuracy, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__

# The co-vote readout's weight: its kernel has mean diagonal 1 whatever the data size, so one number serves;
# chosen on polis-dev's held-out training people (docs/methods.md, "Decided by measurement").
WEIGHT = 20.0


class StanceConfig(MethodView):
    """The stance space: a learned projection of frozen sentence features in which a candidate is compared with
    what the person agreed with and rejected (`prbench.rewards.stance`; defaults chosen on polis-dev, docs/methods.md)."""

    encoder: str = ENCODER_FIELD
    rank: int = count(64, "Dimension B of the stance space.", 4096)
    members: int = count(3, "Projections trained from different starts and averaged (ensemble).", 64)
    readout: str = opt("mean,nearest", "Comma list: mean (latent user vector), nearest (closest agreed minus "
                                       "closest rejected item).", metavar="LIST")
    tau: float = opt(0.1, "Temperature of the nearest readout's soft maximum.", gt=0)
    epochs: int = count(15, "Passes over the training people.", 100_000)
    draws: int = count(4, "Leave-two-out samples per person and epoch.", 10_000)
    min_evidence: int = count(4, "Fewest evidence items in a training sample.", 10_000)
    max_evidence: int = count(30, "Most evidence items in a training sample.", 10_000)
    lr: float = opt(1e-3, "Learning rate.", gt=0)
    scale: float = opt(5.0, "Margin scale inside the Bradley-Terry loss (similarities lie in [-1, 1]).", gt=0)
    batch_size: int = count(64, "Samples per optimisation step.", 1 << 20)
    top_k: int = count(100, "Profile items each view shows; a person's judgments are the evidence, so all of them "
                            "(eval uses the folder's number unless --top-k is given).", 10_000)
    votes_rank: int = count(256, "Rank of the co-vote kernel's factors (at most the number of judged texts and of "
                                 "people; 0: no co-vote readout).", 4096, lo=0)
    votes_prior: float = opt(5.0, "Pseudo-count that shrinks a text's mean vote toward 0 when few people judged it.",
                             ge=0)
    votes_weight: float = opt(WEIGHT, "Weight of the co-vote readout beside the projection's.", ge=0)
    votes_match: float = opt(0.95, "Cosine of frozen features at which a text counts as a judged one.", gt=0, le=1)

    def readouts(self) -> tuple[str, ...]:
        parts = tuple(dict.fromkeys(p.strip() for p in self.readout.split(",") if p.strip()))
        bad = [p for p in parts if p not in READOUTS]
        if bad or not parts:
            raise PrbenchError(f"stance --readout: {', '.join(bad) or 'empty'} is not one of {', '.join(READOUTS)}")
        return parts


def judgments_by_user(pairs: Sequence[PreferencePair]) -> dict[str, list[tuple[str, float]]]:
    """Each person's signed judgments: their profiles' evidence and their labelled pairs, without repeats."""
    out: dict[str, dict[str, float]] = {}
    for p in pairs:
        mine = out.setdefault(p.user_id, {})
        for text, sign in [*signed(post_evidence(p.profile)), (p.chosen, 1.0), (p.rejected, -1.0)]:
            mine.setdefault(text, sign)
    return {u: list(v.items()) for u, v in out.items()}


def draw_samples(people: Sequence[list[tuple[str, float]]], cfg: StanceConfig, rng: random.Random
                 ) -> list[tuple[str, str, list[tuple[str, float]]]]:
    """One epoch's (held-out +1 text, held-out -1 text, evidence) samples (module docstring)."""
    out = []
    for items in people:
        pos = [i for i, (_, s) in enumerate(items) if s > 0]
        neg = [i for i, (_, s) in enumerate(items) if s < 0]
        if not pos or not neg:
            continue
        for _ in range(cfg.draws):
            a, d = rng.choice(pos), rng.choice(neg)
            rest = [items[i] for i in range(len(items)) if i not in (a, d)]
            rng.shuffle(rest)
            size = rng.randint(min(cfg.min_evidence, cfg.max_evidence), cfg.max_evidence)
            out.append((items[a][0], items[d][0], rest[:size]))
    return out


def train_stance(pairs: Sequence[PreferencePair], out: str | Path, config: StanceConfig | None = None, *,
                 cache: Cache | None = None) -> TrainResult:
    import torch

    cfg = config or StanceConfig()
    readouts = cfg.readouts()
    embed = start_training("train_stance", pairs, cfg.seed, cfg.encoder, cache)
    people = judgments_by_user(pairs)
    texts = list(dict.fromkeys(t for v in people.values() for t, _ in v))
    table = torch.from_numpy(embed(texts))
    index = {t: i for i, t in enumerate(texts)}
    users, _ = user_index(pairs)
    model_cfg: dict[str, Any] = {"arch": "stance", "encoder": cfg.encoder, "feature_dim": int(table.shape[1]),
                                 "rank": cfg.rank, "members": cfg.members, "readouts": list(readouts), "tau": cfg.tau,
                                 "users": users}
    model = build_stance(model_cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    rng = random.Random(f"{cfg.seed}:stance")
    log: list[dict[str, Any]] = []
    with torch_threads():
        for epoch in range(1, cfg.epochs + 1):
            samples = draw_samples(list(people.values()), cfg, rng)
            total, margins = 0.0, []
            for start in range(0, len(samples), cfg.batch_size):
                chunk = samples[start:start + cfg.batch_size]
                ev, sign, mask = pad_evidence([s[2] for s in chunk], table, index)
                margin = (model.reward(table[[index[s[0]] for s in chunk]], ev, sign, mask, votes=False)
                          - model.reward(table[[index[s[1]] for s in chunk]], ev, sign, mask, votes=False))
                loss = -torch.nn.functional.logsigmoid(cfg.scale * margin).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(chunk)
                margins.append(margin.detach())
            log.append({"epoch": epoch, "loss": total / max(len(samples), 1),
                        "accuracy": pair_accuracy(torch.cat(margins)) if margins else float("nan"),
                        "samples": len(samples)})
    votes = _votes(model, list(people.values()), cfg, embed)
    model_cfg.update({"votes": votes, "view_top_k": cfg.top_k})
    model_cfg.update({"condition": cfg.condition, "retriever": cfg.retriever, "top_k": cfg.top_k,
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__,
                                "judgments_mean": sum(len(v) for v in people.values()) / max(len(people), 1)}})
    path = save_head(out, model_cfg, model, kind="stance")
    write_log(path, log)
    return TrainResult(path, log)


def _votes(model: Any, people: Sequence[list[tuple[str, float]]], cfg: StanceConfig, embed: Any) -> dict[str, Any]:
    """Fill the model's co-vote buffers (`covote_factors`); returns what its config records of them."""
    import torch

    texts, factors, means = covote_factors(people, cfg.votes_rank, cfg.votes_prior) if cfg.votes_rank else ([], None, None)
    if not texts or factors is None:
        return {"texts": 0, "rank": 0, "weight": 0.0}
    model.vote_keys = torch.from_numpy(embed(texts))
    model.vote_factors, model.vote_means = torch.from_numpy(factors), torch.from_numpy(means)
    return {"texts": len(texts), "rank": int(factors.shape[1]), "weight": cfg.votes_weight, "prior": cfg.votes_prior,
            "match": cfg.votes_match}


METHOD = Method("stance", train_stance, StanceConfig, "stance",
                "Train the stance space. Frozen sentence features, a learned projection; the answer is compared with "
                "what the person agreed with and rejected; stance:OUT.", cost=1, recommend=True)
