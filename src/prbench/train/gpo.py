"""Meta-training GPO (`prbench.rewards.gpo` for the formula) over training users, plain torch.

One step = one episode per training user (in a seeded order): a random context of 0..max_shots
of their pairs plus the posts their views show (each dropped with `post_dropout`), the other
pairs as targets, BT loss on the targets; Adam over `steps` steps. The training users' pairs
are stored as their contexts. Saves a folder that loads as `gpo:<dir>`.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from prbench.config import EpisodeMethod, count, opt
from prbench.data.pairs import PreferencePair
from prbench.rewards.gpo import build_gpo
from prbench.rewards.pal import context_items, torch_threads
from prbench.store.cache import Cache
from prbench.train import TrainResult, pair_accuracy, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class GPOConfig(EpisodeMethod):
    """GPO: a small transformer reads a user's labelled pairs (and shown posts) in context; meta-trained over users."""

    dim: int = count(64, "Token width.", 1 << 16)
    heads: int = count(4, "Attention heads.", 256)
    layers: int = count(2, "Transformer layers.", 64)
    steps: int = count(150, "Optimisation steps (one episode per training user each).", 10**6)
    lr: float = opt(1e-3, "Learning rate.", gt=0)


def train_gpo(pairs: Sequence[PreferencePair], out: str | Path, config: GPOConfig | None = None, *,
              cache: Cache | None = None) -> TrainResult:
    import torch

    from prbench.rewards.heads import save_head
    from prbench.train.bt import pair_views

    cfg = config or GPOConfig()
    embed = start_training("train_gpo", pairs, cfg.seed, cfg.encoder, cache)
    users, _ = user_index(pairs)
    views = pair_views(pairs, cfg.condition, retriever=cfg.retriever, top_k=cfg.top_k) if cfg.condition != "none" else []
    posts_of = {p.user_id: context_items(v) for p, v in zip(pairs, views)}
    yc, yr = torch.from_numpy(embed([p.chosen for p in pairs])), torch.from_numpy(embed([p.rejected for p in pairs]))
    post_emb = {u: torch.from_numpy(embed(ps)) for u, ps in posts_of.items()}
    by_user: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        by_user[p.user_id].append(i)
    model_cfg = {"arch": "gpo", "encoder": cfg.encoder, "embed_dim": int(yc.shape[1]), "dim": cfg.dim,
                 "heads": cfg.heads, "layers": cfg.layers, "users": users, "max_shots": cfg.max_shots}
    model = build_gpo(model_cfg)
    with torch.no_grad():
        model.center.copy_(torch.cat([yc, yr]).mean(0))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng, log = random.Random(cfg.seed), []
    model.train()
    with torch_threads():
        for step in range(1, cfg.steps + 1):
            losses, margins = [], []
            for u in rng.sample(users, len(users)):
                idx = by_user[u][:]
                rng.shuffle(idx)
                k = rng.randint(0, min(cfg.max_shots, len(idx) - 1))
                ctx_i, tgt = idx[:k], idx[k:]
                posts = post_emb.get(u, torch.zeros(0, yc.shape[1]))
                keep = [j for j in range(len(posts)) if rng.random() >= cfg.post_dropout]
                ctx = model.context(yc[ctx_i], yr[ctx_i], posts[keep])
                scores = model(ctx, torch.cat([yc[tgt], yr[tgt]]))
                m = scores[: len(tgt)] - scores[len(tgt):]
                losses.append(-torch.nn.functional.logsigmoid(m).mean())
                margins.append(m.detach())
            loss = torch.stack(losses).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % max(1, cfg.steps // 10) == 0 or step == cfg.steps:
                log.append({"epoch": step, "loss": float(loss.detach()), "accuracy": pair_accuracy(torch.cat(margins))})
    model.eval()
    pick = random.Random(f"{cfg.seed}:gpo-contexts")
    contexts = {u: [(pairs[i].chosen, pairs[i].rejected) for i in
                    (by_user[u] if len(by_user[u]) <= cfg.max_shots else pick.sample(by_user[u], cfg.max_shots))]
                for u in users}
    model_cfg.update({"condition": cfg.condition, "retriever": cfg.retriever, "top_k": cfg.top_k, "contexts": contexts,
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__}})
    out = save_head(out, model_cfg, model, kind="gpo")
    write_log(out, log)
    return TrainResult(out, log)


METHOD = Method("gpo", train_gpo, GPOConfig, "gpo",
                "Train GPO. A small transformer reads a user's labelled pairs in context, meta-trained; gpo:OUT.",
                cost=3)
