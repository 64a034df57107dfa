"""Training the persona space (`prbench.rewards.style`, formula there) in plain torch: full-batch BT.

The features are fitted on the training texts (profile posts, chosen and rejected answers),
the standardisation on the same texts; then A is learned on the margins of the training pairs
under the views of `condition` (the posts each view shows). Saves a folder that loads as
`style:<dir>`. Seconds on CPU for hundreds of pairs: no sentence encoder runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from prbench.config import MethodView, count, opt
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.heads import save_head
from prbench.rewards.pal import context_items, torch_threads
from prbench.rewards.style import ENCODER_NAME, StyleFeatures, build_style
from prbench.store.cache import Cache
from prbench.train import TrainResult, pair_accuracy, seed_everything, user_index, write_log
from prbench.train.methods import Method
from prbench.version import __version__


class StyleConfig(MethodView):
    """The persona space over lexical + stylometric features (`prbench.rewards.style`); defaults chosen on the
    real-text DSP persona split (docs/methods.md)."""

    rank: int = count(8, "Dimension B of the persona space.", 4096)
    vocab_size: int = count(6000, "Word/bigram/char-4-gram features kept (most frequent in the training texts).", 10**7)
    steps: int = count(200, "Full-batch optimisation steps.", 10**6)
    lr: float = opt(1e-2, "Learning rate.", gt=0)
    l2: float = opt(1.0, "L2 penalty on the persona map A (strong: few training users).", ge=0)
    offset_l2: float = opt(1.0, "Pull of a user's k-shot offset toward the profile prior.", ge=0)


def train_style(pairs: Sequence[PreferencePair], out: str | Path, config: StyleConfig | None = None, *,
                cache: Cache | None = None) -> TrainResult:
    import torch

    from prbench.train.bt import pair_views

    cfg = config or StyleConfig()
    if not pairs:
        raise PrbenchError("train_style: no training pairs")
    seed_everything(cfg.seed)
    views = pair_views(pairs, cfg.condition, retriever=cfg.retriever, top_k=cfg.top_k, seed=cfg.seed)
    posts = [context_items(v) for v in views]
    if not any(posts):
        raise PrbenchError(f"train_style: no pair shows any profile post under condition {cfg.condition!r}")
    texts = list(dict.fromkeys([t for ps in posts for t in ps] + [p.chosen for p in pairs] + [p.rejected for p in pairs]))
    feats = StyleFeatures.fit(texts, cfg.vocab_size)
    users, _ = user_index(pairs)
    model_cfg = {"arch": "style", "encoder": ENCODER_NAME, "feature_dim": feats.dim, "rank": cfg.rank, "users": users,
                 "vocab": list(feats.vocab), "idf": feats.idf.tolist()}
    model = build_style(model_cfg)
    table = torch.from_numpy(feats(texts))
    with torch.no_grad():
        model.mean.copy_(table.mean(0))
        model.spread.copy_(table.std(0) + 1e-3)
    row = {t: i for i, t in enumerate(texts)}
    post_mean = torch.stack([table[[row[t] for t in ps]].mean(0) if ps else torch.zeros(feats.dim) for ps in posts])
    has = torch.tensor([bool(ps) for ps in posts])
    yc, yr = table[[row[p.chosen] for p in pairs]], table[[row[p.rejected] for p in pairs]]
    opt = torch.optim.Adam([model.proj], lr=cfg.lr)
    log = []
    with torch_threads():
        for step in range(1, cfg.steps + 1):
            margin = (model.user(post_mean, has) * (model.space(yc) - model.space(yr))).sum(-1)
            loss = -torch.nn.functional.logsigmoid(margin).mean() + cfg.l2 * (model.proj**2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % max(1, cfg.steps // 10) == 0 or step == cfg.steps:
                log.append({"epoch": step, "loss": float(loss.detach()), "accuracy": pair_accuracy(margin.detach())})
    model_cfg.update({"condition": cfg.condition, "retriever": cfg.retriever, "top_k": cfg.top_k,
                      "offset_l2": cfg.offset_l2,
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "users": len(users), "prbench": __version__,
                                "posts_shown_mean": float(np.mean([len(ps) for ps in posts]))}})
    out = save_head(out, model_cfg, model, kind="style")
    write_log(out, log)
    return TrainResult(out, log)


METHOD = Method("style", train_style, StyleConfig, "style",
                "Train the persona space. Lexical + stylometric features of profile and response, a learned map; "
                "style:OUT.", cost=0.5, recommend=True)
