"""LoRe (low-rank reward modelling, Bose et al. 2025) over a frozen sentence encoder: `lore:<dir>`.

Formula. phi(y) is the frozen, normalised embedding of response y, centred by the training
mean c. A shared basis V (d x B, B = `rank`) gives B basis rewards R(y) = V^T (phi(y) - c).
User u weighs them with simplex weights w_u = softmax(l_u), and r_u(x, y) = w_u . R(y).

Where l_u comes from (the part that decides generalisation to unseen users):
- `prior="profile"` (default): l_u = V^T (mean_j phi(post_j) - c) / t + delta_u. The posts are
  the ones the view shows, scored by the *same* basis: a user weighs most the basis rewards
  their own texts express (a latent-persona mixture), t is learned. delta_u is a per-user
  offset: 0 for an unseen user with no labelled pairs, fitted on k pairs with V frozen and an
  L2 pull to 0 (so the profile is the prior and shots refine it). Training first fits V and t
  with delta = 0 (so the profile path must carry the signal), then each training user's delta.
- `prior="none"` (LoRe as published): l_u is a free vector per training user learned jointly
  with V; an unseen user gets the uniform mixture until fitted on k pairs.
Under condition `none` there are no posts and no user: the uniform mixture, a user-blind RM.
Under `history` the view's earlier pairs are k shots: delta is fitted on them (no posts, so no
prior), in place of any offset stored for that user.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.rewards.base import Score
from prbench.rewards.heads import HeadOptions, HeadReward
from prbench.rewards.pal import torch_threads
from prbench.runtime.extras import require

PRIORS = ("profile", "none")


def build_lore(config: dict[str, Any]):
    torch = require("torch", "hf")
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class LoReModel(torch_module):
        """Basis V, profile temperature, per-user offsets (rows follow config['users'])."""

        def __init__(self, emb: int, rank: int, n_users: int, prior: str):
            super().__init__()
            if prior not in PRIORS:
                raise PrbenchError(f"LoRe prior must be one of {PRIORS}, got {prior!r}")
            self.prior, self.rank = prior, rank
            self.basis = nn.Linear(emb, rank, bias=False)
            nn.init.normal_(self.basis.weight, std=1.0 / math.sqrt(emb))
            self.register_buffer("center", torch.zeros(emb))
            self.log_temp = nn.Parameter(torch.tensor(math.log(0.1)))
            self.offsets = nn.Parameter(torch.zeros(n_users, rank))

        def rewards(self, y):
            """Basis rewards R(y), shape (n, B)."""
            return self.basis(y - self.center)

        def prior_logits(self, post_mean, has_posts):
            """Profile-inferred logits (n, B); zero without posts or under prior `none`."""
            if self.prior == "none":
                return torch.zeros(len(post_mean), self.rank)
            return self.rewards(post_mean) / self.log_temp.exp() * has_posts.unsqueeze(-1).to(post_mean.dtype)

        def forward(self, y, logits):
            return (torch.softmax(logits, dim=-1) * self.rewards(y)).sum(-1)

    return LoReModel(config["embed_dim"], config["rank"], len(config.get("users", [])), config.get("prior", "profile"))


def fit_offsets(model, yc, yr, prior, owner, n_owners: int, *, steps: int, lr: float, l2: float):
    """Per-owner offsets delta (n_owners, B) minimising BT + l2 * ||delta||^2 with the model frozen.

    Owners are independent (the loss is a sum over owners), so all users are fitted in one
    batched problem. Deterministic: zero start, full-batch Adam.
    """
    torch = require("torch", "hf")
    delta = torch.zeros(n_owners, model.rank, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    counts = torch.bincount(owner, minlength=n_owners).clamp(min=1).to(yc.dtype)
    try:
        with torch.no_grad():
            rc, rr = model.rewards(yc), model.rewards(yr)
        with torch.enable_grad():  # also when a scorer calls it under no_grad (history shots)
            for _ in range(steps):
                w = torch.softmax(prior + delta[owner], dim=-1)
                margin = (w * (rc - rr)).sum(-1)
                per_owner = torch.zeros(n_owners).index_add(0, owner, -torch.nn.functional.logsigmoid(margin)) / counts
                loss = per_owner.sum() + l2 * (delta**2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    return delta.detach()


def post_means(embed, post_lists: Sequence[Sequence[str]], dim: int):
    """Mean embedding of each list of posts (zeros where empty) and a mask of non-empty lists."""
    torch = require("torch", "hf")
    flat = [t for ps in post_lists for t in ps]
    table = torch.from_numpy(embed(flat)) if flat else torch.zeros(0, dim)
    out = torch.zeros(len(post_lists), dim)
    has = torch.zeros(len(post_lists), dtype=torch.bool)
    start = 0
    for i, ps in enumerate(post_lists):
        if ps:
            out[i] = table[start : start + len(ps)].mean(0)
            has[i] = True
        start += len(ps)
    return out, has


class LoReOptions(HeadOptions):
    adapt_steps: int = 200
    adapt_lr: float = 0.1
    adapt_l2: float | None = None
    history_l2: float = 0.01


class LoReReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train lore`.

    Options: `encoder_cache`, `adapt` (a pairs file: its unseen users are fitted at load),
    `adapt_steps` (200), `adapt_lr` (0.1), `adapt_l2` (the trained value by default),
    `history_l2` (0.01: the pull on offsets fitted to history shots; with no posts shown there
    is no profile prior to keep them near, and the trained pull of 0.1 holds them at the
    user-blind uniform mixture: chance on the persona check, 91% at 0.01 and at 0.001).
    """

    kind_name = "lore"
    options_model = LoReOptions
    build = staticmethod(build_lore)

    def __init__(self, path: str, spec: str | None = None, adapt_steps: int = 200, adapt_lr: float = 0.1,
                 adapt_l2: float | None = None, history_l2: float = 0.01, **options: Any):
        self.adapt_steps, self.adapt_lr, self.history_l2 = adapt_steps, adapt_lr, history_l2
        self._l2 = adapt_l2
        super().__init__(path, spec, **options)

    @property
    def adapt_l2(self) -> float:
        return self._l2 if self._l2 is not None else float(self.config.get("offset_l2", 0.1))

    def _offsets(self, views: Sequence[View]):
        torch = require("torch", "hf")
        rows = self.user_rows(views, self.model.offsets.detach(), torch.zeros(self.model.rank))
        return torch.stack(rows) if rows else torch.zeros(0, self.model.rank)

    def logits(self, views: Sequence[View]):
        """Each view's user logits: profile prior from the shown posts plus the user's offset."""
        torch = require("torch", "hf")
        posts = [self.posts_of(v) for v in views]
        self.counts["no_evidence"] += sum(1 for v, p in zip(views, posts) if not p and self.user_of(v) is None)
        mean, has = post_means(self.embed, posts, self.config["embed_dim"])
        with torch.no_grad():
            return self.model.prior_logits(mean, has) + self._offsets(views)

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            logits = self.logits([v for v, _ in batch])
            values = self.model(self._tensor([r for _, r in batch]), logits)
        return [Score(float(v)) for v in values]

    def mixture(self, view: View) -> np.ndarray:
        """The simplex weights this view's user gets (for inspection and tests)."""
        torch = require("torch", "hf")
        return torch.softmax(self.logits([view])[0], -1).numpy()

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        """Offsets for history views, all lists in one batched fit (V frozen; no posts shown, so no prior)."""
        torch = require("torch", "hf")
        flat = [p for shots in shot_lists for p in shots]
        owner = torch.tensor([i for i, shots in enumerate(shot_lists) for _ in shots], dtype=torch.long)
        yc, yr = self._tensor([p.chosen for p in flat]), self._tensor([p.rejected for p in flat])
        with torch_threads():
            delta = fit_offsets(self.model, yc, yr, torch.zeros(len(flat), self.model.rank), owner, len(shot_lists),
                                steps=self.adapt_steps, lr=self.adapt_lr, l2=self.history_l2)
        return list(delta)

    def fingerprint(self) -> dict[str, Any]:
        # the fitting settings decide scores under history (shots fitted per view)
        return {**super().fingerprint(), "shots": [self.adapt_steps, self.adapt_lr, self.history_l2]}

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """Fit `user`'s offset on their labelled pairs (V frozen; the profile prior stays under it).

        Replaces any earlier shots of this user; no pairs -> back to the prior alone.
        """
        self.adapted.pop(user, None)
        if not pairs:
            return
        torch = require("torch", "hf")
        from prbench.context.conditions import pair_views

        views = pair_views(pairs, self.config.get("condition", "profile") if self.model.prior == "profile" else "none",
                           retriever=self.config.get("retriever", "bm25"), top_k=self.config.get("top_k", 10))
        mean, has = post_means(self.embed, [self.posts_of(v) for v in views], self.config["embed_dim"])
        with torch.no_grad(), torch_threads():
            prior = self.model.prior_logits(mean, has)
        yc, yr = self._tensor([p.chosen for p in pairs]), self._tensor([p.rejected for p in pairs])
        with torch_threads():
            delta = fit_offsets(self.model, yc, yr, prior, torch.zeros(len(pairs), dtype=torch.long), 1,
                                steps=self.adapt_steps, lr=self.adapt_lr, l2=self.adapt_l2)
        self.adapted[user] = delta[0].numpy().copy()
