"""Training LoRe (see `prbench.rewards.lore` for the formula) in plain torch on frozen embeddings.

With `prior="profile"`: phase 1 learns V and the profile temperature with every offset at 0
(BT loss on each pair under the posts its view shows); phase 2 fits each training user's
offset with V frozen, exactly as an unseen user is later fitted from k shots.
With `prior="none"`: V and free per-user logits are learned jointly (LoRe as published).
Saves a folder that loads as `lore:<dir>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from prbench.config import ENCODER_FIELD, MethodView, count, opt
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.heads import save_head
from prbench.rewards.lore import build_lore, fit_offsets, post_means
from prbench.rewards.pal import context_items
from prbench.store.cache import Cache
from prbench.train import TrainResult, fit_pairwise, pair_accuracy, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class LoReConfig(MethodView):
    """LoRe: a shared low-rank reward basis over frozen features, per-user simplex weights (defaults chosen on
    held-out synthetic users, docs/methods.md)."""

    prior: Literal["profile", "none"] = opt(
        "profile", "profile: user weights inferred from the shown posts (+ k-shot offsets); none: free per-user "
                   "weights (LoRe as published).", metavar="NAME")
    rank: int = count(16, "Number of basis rewards B (rank of V).", 4096)
    epochs: int = count(60, "Training epochs.", 100_000)
    lr: float = opt(5e-3, "Learning rate.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the free user logits (prior none).", gt=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(1e-4, "Weight decay.", ge=0)
    offset_l2: float = opt(0.1, "Pull of a user's offset toward the profile prior.", ge=0)
    offset_steps: int = count(200, "Steps fitting a user's offset to their shots.", 100_000)
    offset_lr: float = opt(0.1, "Learning rate of the offset fit.", gt=0)
    encoder: str = ENCODER_FIELD


def train_lore(pairs: Sequence[PreferencePair], out: str | Path, config: LoReConfig | None = None, *,
               cache: Cache | None = None) -> TrainResult:
    import torch

    from prbench.train.bt import pair_views

    cfg = config or LoReConfig()
    condition = cfg.condition if cfg.prior == "profile" else "none"
    embed = start_training("train_lore", pairs, cfg.seed, cfg.encoder, cache)
    users, index = user_index(pairs)
    yc = torch.from_numpy(embed([p.chosen for p in pairs]))
    yr = torch.from_numpy(embed([p.rejected for p in pairs]))
    views = pair_views(pairs, condition, retriever=cfg.retriever, top_k=cfg.top_k) if condition != "none" else []
    mean, has = post_means(embed, [context_items(v) for v in views] if views else [[] for _ in pairs], yc.shape[1])
    if cfg.prior == "profile" and not bool(has.any()):
        raise PrbenchError("train_lore: prior 'profile' needs pairs with profile posts (use --prior none)")
    model_cfg: dict[str, Any] = {"arch": "lore", "encoder": cfg.encoder, "embed_dim": int(yc.shape[1]),
                                 "rank": cfg.rank, "prior": cfg.prior, "users": users}
    model = build_lore(model_cfg)
    with torch.no_grad():
        model.center.copy_(torch.cat([yc, yr]).mean(0))
    u = torch.tensor([index[p.user_id] for p in pairs])

    if cfg.prior == "profile":
        groups = [{"params": [model.basis.weight, model.log_temp], "lr": cfg.lr}]

        def margin(idx):
            logits = model.prior_logits(mean[idx], has[idx])
            return model(yc[idx], logits) - model(yr[idx], logits)
    else:
        groups = [{"params": [model.basis.weight], "lr": cfg.lr},
                  {"params": [model.offsets], "lr": cfg.user_lr, "weight_decay": 0.0}]

        def margin(idx):
            return model(yc[idx], model.offsets[u[idx]]) - model(yr[idx], model.offsets[u[idx]])

    model.train()
    log = fit_pairwise(margin, groups, len(pairs), epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed,
                       weight_decay=cfg.weight_decay)
    model.eval()
    if cfg.prior == "profile":
        with torch.no_grad():
            prior = model.prior_logits(mean, has)
        delta = fit_offsets(model, yc, yr, prior, u, len(users), steps=cfg.offset_steps, lr=cfg.offset_lr,
                            l2=cfg.offset_l2)
        with torch.no_grad():
            model.offsets.copy_(delta)
            fitted = pair_accuracy(model(yc, prior + delta[u]) - model(yr, prior + delta[u]))
        log[-1]["accuracy_with_offsets"] = fitted
    model_cfg.update({"condition": condition, "retriever": cfg.retriever, "top_k": cfg.top_k,
                      "offset_l2": cfg.offset_l2,
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__}})
    out = save_head(out, model_cfg, model, kind="lore")
    write_log(out, log)
    return TrainResult(out, log)


METHOD = Method("lore", train_lore, LoReConfig, "lore",
                "Train LoRe. A shared low-rank reward basis over frozen features, per-user simplex weights; lore:OUT.",
                cost=2)
