"""Training PAL (Chen et al., ICLR 2025) in plain torch on a frozen sentence encoder.

The encoder is frozen and its embeddings cached, so an epoch is a few small matrix products:
hundreds of pairs train in seconds on CPU. Trained users get a row of mixture logits; users
not in training are scored with the uniform mixture unless adapted (`adapt_pairs` here, or
`PALReward.adapt` / the `adapt=` load option later), which fits only their K logits.
The saved folder (config.json + model.safetensors) loads as `pal:<dir>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from prbench.config import ENCODER_FIELD, MethodView, Settings, count, field_of, opt
from prbench.data.pairs import PreferencePair, users_of
from prbench.errors import PrbenchError
from prbench.rewards.pal import Embedder, build_model, fit_mixture, save_folder
from prbench.store.cache import Cache
from prbench.train import TrainResult, fit_pairwise, pair_accuracy, start_training, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class PALConfig(Settings):
    """PAL: users as mixtures of K prototypes. `user_lr` is larger than `lr`: user logits get few gradient signals."""

    arch: Literal["pal-a", "pal-b"] = opt("pal-a", "pal-a (ideal points) or pal-b (mixture of projections).",
                                          metavar="NAME")
    k_prototypes: int = count(8, "Number of prototypes K.", 4096)
    dim: int = count(32, "Dimension of the preference space.", 1 << 16)
    hidden: int = count(0, "Hidden units of the projection (0: linear, best held-out on small data).", 1 << 16, lo=0)
    prompt_shift: bool = opt(False, "Shift the ideal points by the prompt.")
    epochs: int = count(40, "Training epochs.", 100_000)
    lr: float = opt(3e-3, "Learning rate.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the user mixture logits.", gt=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(0.0, "Weight decay.", ge=0)
    seed: int = field_of(MethodView, "seed")
    encoder: str = ENCODER_FIELD
    adapt_steps: int = count(200, "Steps fitting a new user's mixture to their shots.", 100_000)
    adapt_lr: float = opt(0.1, "Learning rate of that fit.", gt=0)


def _tensors(embed: Embedder, pairs: Sequence[PreferencePair]):
    import torch

    x = torch.from_numpy(embed([p.prompt for p in pairs]))
    c = torch.from_numpy(embed([p.chosen for p in pairs]))
    r = torch.from_numpy(embed([p.rejected for p in pairs]))
    return x, c, r


def train_pal(
    pairs: Sequence[PreferencePair],
    out: str | Path,
    config: PALConfig | None = None,
    *,
    eval_pairs: Sequence[PreferencePair] = (),
    adapt_pairs: Sequence[PreferencePair] = (),
    cache: Cache | None = None,
) -> TrainResult:
    """Train PAL on `pairs`, log per epoch, adapt unseen users in `adapt_pairs`, save to `out`.

    `eval_pairs` are scored each epoch (`eval_accuracy`); their users are looked up among the
    trained and adapted ones, else the uniform mixture is used (honest zero-shot number).
    """
    import torch

    cfg = config or PALConfig()
    if cfg.arch not in ("pal-a", "pal-b"):
        raise PrbenchError(f"PAL arch must be pal-a or pal-b, got {cfg.arch!r}")
    embed = start_training("train_pal", pairs, cfg.seed, cfg.encoder, cache)
    users, index = user_index(pairs)
    x, c, r = _tensors(embed, pairs)
    model_cfg: dict[str, Any] = {
        "arch": cfg.arch, "encoder": cfg.encoder, "embed_dim": int(x.shape[1]), "hidden": cfg.hidden,
        "dim": cfg.dim, "k_prototypes": cfg.k_prototypes, "users": users, "prompt_shift": cfg.prompt_shift,
    }
    model = build_model(model_cfg)
    u = torch.tensor([index[p.user_id] for p in pairs])
    shared = [p for n, p in model.named_parameters() if n != "logits"]
    groups = [{"params": shared, "lr": cfg.lr}, {"params": [model.logits], "lr": cfg.user_lr, "weight_decay": 0.0}]

    def margin(idx):
        w = model.weights(u[idx])
        return model(x[idx], c[idx], w) - model(x[idx], r[idx], w)

    eval_fn = None
    if eval_pairs:
        ex, ec, er = _tensors(embed, eval_pairs)
        eu = [index.get(p.user_id) for p in eval_pairs]

        def eval_fn() -> dict[str, float]:
            model.eval()
            with torch.no_grad():
                w = torch.stack([torch.softmax(model.logits[i], -1) if i is not None
                                 else torch.full((cfg.k_prototypes,), 1 / cfg.k_prototypes) for i in eu])
                m = model(ex, ec, w) - model(ex, er, w)
            model.train()
            return {"eval_accuracy": pair_accuracy(m)}

    model.train()
    log = fit_pairwise(margin, groups, len(pairs), epochs=cfg.epochs, batch_size=cfg.batch_size,
                       seed=cfg.seed, weight_decay=cfg.weight_decay, eval_fn=eval_fn)
    model.eval()

    adapted = adapt_users(model, embed, adapt_pairs, known=index, steps=cfg.adapt_steps, lr=cfg.adapt_lr)
    if adapted:  # new users become rows of the saved table: the folder scores them like trained ones
        names = list(adapted)
        with torch.no_grad():
            table = torch.cat([model.logits, torch.from_numpy(np.stack([adapted[n] for n in names]))])
        model.logits = torch.nn.Parameter(table)
        model_cfg["users"] = users + names
    model_cfg.update({
        "condition": "user-id", "adapted_users": list(adapted),
        "example_users": {p.id: p.user_id for p in [*pairs, *adapt_pairs] if p.id},
        "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__},
    })
    out = save_folder(out, model_cfg, model)
    write_log(out, log)
    return TrainResult(out, log)


def adapt_users(model, embed: Embedder, pairs: Sequence[PreferencePair], *, known: dict[str, int],
                steps: int = 200, lr: float = 0.1) -> dict[str, Any]:
    """Few-shot mixture logits for each user in `pairs` not already in `known`."""
    out: dict[str, Any] = {}
    for user in users_of(pairs):
        if user in known:
            continue
        mine = [p for p in pairs if p.user_id == user]
        x, c, r = _tensors(embed, mine)
        out[user] = fit_mixture(model, x, c, r, steps=steps, lr=lr)
    return out


METHOD = Method("pal", train_pal, PALConfig, "pal", cost=2, command=False)
