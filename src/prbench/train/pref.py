"""Training PReF (`prbench.rewards.pref` for the formula) in plain torch on frozen embeddings.

W and every training user's weights are fitted jointly by BT (user weights with their own
learning rate and an L2 pull to 0); then the population prior (mean and spread of the
training users' weights) is stored for the zero-shot user and the MAP few-response fit.
Saves a folder that loads as `pref:<dir>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prbench.config import ENCODER_FIELD, MethodView, count, opt
from prbench.data.pairs import PreferencePair
from prbench.rewards.heads import save_head
from prbench.rewards.pref import build_pref
from prbench.store.cache import Cache
from prbench.train import TrainResult, fit_pairwise, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class PReFConfig(MethodView):
    """PReF: J base rewards over frozen features, a free weight vector per user, few-response MAP adaptation."""

    rank: int = count(16, "Number of base reward functions J.", 4096)
    epochs: int = count(60, "Training epochs.", 100_000)
    lr: float = opt(5e-3, "Learning rate of the base rewards.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the user weights.", gt=0)
    user_l2: float = opt(1e-3, "L2 pull of each user's weights toward 0 in training.", ge=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(1e-4, "Weight decay of the base rewards.", ge=0)
    adapt_prior: float = opt(1.0, "Weight of the population prior in a new user's MAP fit.", ge=0)
    encoder: str = ENCODER_FIELD


def train_pref(pairs: Sequence[PreferencePair], out: str | Path, config: PReFConfig | None = None, *,
               cache: Cache | None = None) -> TrainResult:
    import torch

    cfg = config or PReFConfig()
    embed = start_training("train_pref", pairs, cfg.seed, cfg.encoder, cache)
    users, index = user_index(pairs)
    yc = torch.from_numpy(embed([p.chosen for p in pairs]))
    yr = torch.from_numpy(embed([p.rejected for p in pairs]))
    model_cfg = {"arch": "pref", "encoder": cfg.encoder, "embed_dim": int(yc.shape[1]), "rank": cfg.rank,
                 "users": users}
    model = build_pref(model_cfg)
    with torch.no_grad():
        model.center.copy_(torch.cat([yc, yr]).mean(0))
    u = torch.tensor([index[p.user_id] for p in pairs])

    def margin(idx):
        lam = model.weights[u[idx]]
        return model(yc[idx], lam) - model(yr[idx], lam) - cfg.user_l2 * (lam**2).sum(-1) / len(idx)

    groups = [{"params": [model.basis.weight], "lr": cfg.lr},
              {"params": [model.weights], "lr": cfg.user_lr, "weight_decay": 0.0}]
    model.train()
    log = fit_pairwise(margin, groups, len(pairs), epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed,
                       weight_decay=cfg.weight_decay)
    model.eval()
    with torch.no_grad():
        model.prior_mean.copy_(model.weights.mean(0))
        model.prior_std.copy_(model.weights.std(0).clamp(min=1e-2) if len(users) > 1 else torch.ones(cfg.rank))
    model_cfg.update({"condition": "none", "adapt_prior": cfg.adapt_prior,
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__}})
    out = save_head(out, model_cfg, model, kind="pref")
    write_log(out, log)
    return TrainResult(out, log)


METHOD = Method("pref", train_pref, PReFConfig, "pref",
                "Train PReF. Base rewards over frozen features, weights per user, few-response MAP adaptation; pref:OUT.",
                cost=2)
