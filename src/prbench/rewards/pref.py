"""PReF (personalized reward factorization, Shenfeld et al. 2025) over a frozen sentence encoder: `pref:<dir>`.

Formula. phi(y) is the frozen, normalised embedding of response y, centred by the training
mean c. J base reward functions f(y) = W^T (phi(y) - c) (W is d x J, J = `rank`); a user is a
free weight vector lambda_u in R^J and r_u(x, y) = lambda_u . f(y) (no simplex: PReF's
factorization, unlike LoRe's mixture). Training: BT over all training users' pairs, W and every
lambda_u jointly, L2 on lambda toward 0. The population prior is the training users' mean
weight lambda_bar and their spread; a new user (no pairs) is scored with lambda_bar (the
average user), and *few-response adaptation* fits lambda_u on k labelled pairs as a MAP
logistic regression with W frozen and a Gaussian prior N(lambda_bar, diag(s^2) / `adapt_prior`).
PReF reads no profile: under `profile` an unseen user is the average user until adapted.
Under `history` the shown pairs are the shots. Condition `none`: lambda_bar for everyone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import torch_threads
from prbench.runtime.extras import require


def build_pref(config: dict[str, Any]):
    torch = require("torch", "hf")
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class PReFModel(torch_module):
        """Base rewards W, per-user weights (rows follow config['users']), population mean and spread."""

        def __init__(self, emb: int, rank: int, n_users: int):
            super().__init__()
            self.rank = rank
            self.basis = nn.Linear(emb, rank, bias=False)
            nn.init.normal_(self.basis.weight, std=1.0 / math.sqrt(emb))
            self.register_buffer("center", torch.zeros(emb))
            self.weights = nn.Parameter(torch.randn(n_users, rank) * 0.1)
            self.register_buffer("prior_mean", torch.zeros(rank))
            self.register_buffer("prior_std", torch.ones(rank))

        def rewards(self, y):
            return self.basis(y - self.center)

        def forward(self, y, lam):
            return (lam * self.rewards(y)).sum(-1)

    return PReFModel(config["embed_dim"], config["rank"], len(config.get("users", [])))


def fit_weights(model, yc, yr, owner, n_owners: int, *, steps: int, lr: float, strength: float):
    """MAP user weights (n_owners, J): BT on the shots + strength * ||(lambda - lambda_bar) / s||^2, W frozen."""
    torch = require("torch", "hf")
    with torch.no_grad():
        diff = model.rewards(yc) - model.rewards(yr)
    lam = model.prior_mean.expand(n_owners, -1).clone().requires_grad_(True)
    opt = torch.optim.Adam([lam], lr=lr)
    with torch.enable_grad():
        for _ in range(steps):
            nll = -torch.nn.functional.logsigmoid((lam[owner] * diff).sum(-1)).sum()
            loss = nll + strength * (((lam - model.prior_mean) / model.prior_std) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return lam.detach()


class PReFReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train pref`.

    Options: `adapt` (a pairs file), `adapt_steps` (200), `adapt_lr` (0.05), `adapt_prior`
    (the trained value by default: the weight of the population prior in the MAP fit).
    """

    kind_name = "pref"
    build = staticmethod(build_pref)

    def __init__(self, path: str, spec: str | None = None, adapt_steps: int = 200, adapt_lr: float = 0.05,
                 adapt_prior: float | None = None, **options: Any):
        self.adapt_steps, self.adapt_lr, self._prior = adapt_steps, adapt_lr, adapt_prior
        super().__init__(path, spec, **options)

    @property
    def adapt_prior(self) -> float:
        return self._prior if self._prior is not None else float(self.config.get("adapt_prior", 1.0))

    def _weights(self, views):
        torch = require("torch", "hf")
        rows = self.user_rows(views, self.model.weights.detach(), self.model.prior_mean)
        return torch.stack(rows)

    def score(self, batch: Sequence[tuple[Any, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            values = self.model(self._tensor([r for _, r in batch]), self._weights([v for v, _ in batch]))
        return [Score(float(v)) for v in values]

    def _fit(self, shot_lists):
        torch = require("torch", "hf")
        flat = [p for shots in shot_lists for p in shots]
        owner = torch.tensor([i for i, shots in enumerate(shot_lists) for _ in shots], dtype=torch.long)
        yc, yr = self._tensor([p.chosen for p in flat]), self._tensor([p.rejected for p in flat])
        with torch_threads():
            return fit_weights(self.model, yc, yr, owner, len(shot_lists), steps=self.adapt_steps, lr=self.adapt_lr,
                               strength=self.adapt_prior)

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        return list(self._fit(shot_lists))

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """Few-response adaptation: `user`'s MAP weights from their labelled pairs (replaces earlier shots)."""
        self.adapted.pop(user, None)
        if pairs:
            self.adapted[user] = self._fit([list(pairs)])[0].numpy().copy()

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "shots": [self.adapt_steps, self.adapt_lr, self.adapt_prior]}
