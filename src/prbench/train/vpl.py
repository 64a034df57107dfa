"""Training VPL (see `prbench.rewards.vpl` for the formula) in plain torch on frozen embeddings.

One optimisation step is one episode for every training user at once: a seeded random
context of 0..`max_shots` of the user's pairs (plus the posts each target pair's view shows,
dropped with probability `post_dropout` per user), the user's remaining pairs as targets,
loss BT(targets | z ~ q) + beta * KL. After training, each user's pair elements are summed
into the folder, so seen users are scored from all their pairs. Loads as `vpl:<dir>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prbench.config import EpisodeMethod, count, opt
from prbench.data.pairs import PreferencePair
from prbench.rewards.heads import save_head
from prbench.rewards.pal import context_items, torch_threads
from prbench.rewards.vpl import build_vpl
from prbench.store.cache import Cache
from prbench.train import TrainResult, pair_accuracy, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class VPLConfig(EpisodeMethod):
    """VPL: an encoder over the user's pairs (and shown posts) gives a latent z the reward reads."""

    hidden: int = count(64, "Hidden units.", 1 << 16)
    latent: int = count(16, "Dimension of the user latent z.", 4096)
    beta: float = opt(0.01, "Weight of the KL term.", ge=0)
    steps: int = count(300, "Optimisation steps (one episode per user each).", 10**6)
    lr: float = opt(3e-3, "Learning rate.", gt=0)


def train_vpl(pairs: Sequence[PreferencePair], out: str | Path, config: VPLConfig | None = None, *,
              cache: Cache | None = None) -> TrainResult:
    import torch

    from prbench.train.bt import pair_views

    cfg = config or VPLConfig()
    embed = start_training("train_vpl", pairs, cfg.seed, cfg.encoder, cache)
    users, index = user_index(pairs)
    n, n_users = len(pairs), len(users)
    yc = torch.from_numpy(embed([p.chosen for p in pairs]))
    yr = torch.from_numpy(embed([p.rejected for p in pairs]))
    posts = [context_items(v) for v in pair_views(pairs, cfg.condition, retriever=cfg.retriever, top_k=cfg.top_k)] \
        if cfg.condition != "none" else [[] for _ in pairs]
    texts = list(dict.fromkeys(t for ps in posts for t in ps))
    pos = {t: i for i, t in enumerate(texts)}
    post_emb = torch.from_numpy(embed(texts)) if texts else torch.zeros(0, yc.shape[1])
    incidence = torch.zeros(n, max(len(texts), 1))  # pair i shows post j
    for i, ps in enumerate(posts):
        for t in ps:
            incidence[i, pos[t]] = 1.0
    owner = torch.tensor([index[p.user_id] for p in pairs])
    member = torch.nn.functional.one_hot(owner, n_users).T.float()  # (users, pairs)

    model_cfg: dict[str, Any] = {"arch": "vpl", "encoder": cfg.encoder, "embed_dim": int(yc.shape[1]),
                                 "hidden": cfg.hidden, "latent": cfg.latent, "users": users}
    model = build_vpl(model_cfg)
    with torch.no_grad():
        model.center.copy_(torch.cat([yc, yr]).mean(0))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    log: list[dict[str, Any]] = []
    model.train()
    with torch_threads():
        for step in range(1, cfg.steps + 1):
            # Context: for each user, a random number of their pairs (uniform 0..max_shots).
            rank = torch.rand(n, generator=gen)
            shots = torch.randint(0, cfg.max_shots + 1, (n_users,), generator=gen)
            order = torch.argsort(torch.argsort(rank + 2.0 * owner.float()))  # rank of each pair within its user
            first = torch.cumsum(torch.bincount(owner, minlength=n_users), 0) - torch.bincount(owner, minlength=n_users)
            in_ctx = (order - first[owner]) < shots[owner]
            keep_posts = (torch.rand(n_users, generator=gen) >= cfg.post_dropout).float()[owner]
            h_pairs = model.pair_elements(yc, yr)
            ctx_sum = (member * in_ctx.float()) @ h_pairs  # (users, hidden)
            ctx_n = (member * in_ctx.float()).sum(1)
            h_posts = model.post_elements(post_emb) if len(texts) else torch.zeros(1, cfg.hidden)
            post_sum = (incidence @ h_posts) * keep_posts.unsqueeze(-1)
            post_n = incidence.sum(1) * keep_posts
            total, count = ctx_sum[owner] + post_sum, ctx_n[owner] + post_n
            target = ~in_ctx
            mu, logvar = model.q(total / count.clamp(min=1).unsqueeze(-1))
            has = (count > 0).float().unsqueeze(-1)
            mu, logvar = mu * has, logvar * has  # no evidence: the prior N(0, I)
            z = mu + torch.randn(mu.shape, generator=gen) * (0.5 * logvar).exp()
            margin = model(yc, z) - model(yr, z)
            bt = -torch.nn.functional.logsigmoid(margin[target]).mean()
            kl = (0.5 * (mu**2 + logvar.exp() - 1 - logvar).sum(-1))[target].mean()
            loss = bt + cfg.beta * kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % max(cfg.steps // 10, 1) == 0 or step == cfg.steps:
                log.append({"epoch": step, "loss": float(loss.detach()), "bt": float(bt.detach()), "kl": float(kl.detach()),
                            "accuracy": pair_accuracy(margin[target].detach())})
        model.eval()
        with torch.no_grad():
            h = model.pair_elements(yc, yr)
            model.user_sum.copy_(member @ h)
            model.user_count.copy_(member.sum(1))
    model_cfg.update({"condition": cfg.condition, "retriever": cfg.retriever, "top_k": cfg.top_k,
                      "train": {**cfg.model_dump(), "pairs": n, "users": n_users, "prbench": __version__}})
    out = save_head(out, model_cfg, model, kind="vpl")
    write_log(out, log)
    return TrainResult(out, log)


METHOD = Method("vpl", train_vpl, VPLConfig, "vpl",
                "Train VPL. An encoder over the user's pairs (and shown posts) gives a latent z the reward reads; vpl:OUT.",
                cost=3)
