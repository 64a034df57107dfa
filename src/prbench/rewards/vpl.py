"""VPL (variational preference learning, Poddar et al. 2024) over a frozen sentence encoder: `vpl:<dir>`.

Formula. The user is a latent z in R^Z. An encoder reads a *set* of the user's evidence:
each labelled pair (c, r) is the element e = g([phi(c) - m, phi(r) - m, 1, 0]) and (our
addition, so that a profile alone says something) each shown profile post p is
e = g([phi(p) - m, 0, 0, 1]), with g a two-layer GELU MLP and m the training mean embedding.
Mean pooling and a linear map give q(z | evidence) = N(mu, diag(sigma^2)). The decoder is
r(x, y, z) = f([phi(y) - m, z]), a GELU MLP. Loss per training step, with a random context of
0..`max_shots` of each user's pairs (posts dropped with probability `post_dropout`) and the
user's other pairs as targets: BT(targets | z ~ q) + beta * KL(q || N(0, I)).
Scoring uses z = mu; with no evidence at all (condition `none`, an unknown user without
posts) z = 0, the prior mean: a user-blind RM. Under `history` the view's earlier pairs are the
evidence (in place of any stored for that user). Training users' pair elements are stored
(their sum and count), few-shot `adapt` adds a new user's pairs the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prbench.context.conditions import View
from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import torch_threads
from prbench.runtime.extras import require


def build_vpl(config: dict[str, Any]):
    torch = require("torch", "hf")
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class VPLModel(torch_module):
        def __init__(self, emb: int, hidden: int, latent: int, n_users: int):
            super().__init__()
            self.emb, self.hidden, self.latent = emb, hidden, latent
            self.element = nn.Sequential(nn.Linear(2 * emb + 2, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
            self.posterior = nn.Linear(hidden, 2 * latent)
            self.decoder = nn.Sequential(nn.Linear(emb + latent, hidden), nn.GELU(), nn.Linear(hidden, 1))
            self.register_buffer("center", torch.zeros(emb))
            self.register_buffer("user_sum", torch.zeros(n_users, hidden))
            self.register_buffer("user_count", torch.zeros(n_users))

        def pair_elements(self, c, r):
            n = len(c)
            kind = torch.tensor([1.0, 0.0]).expand(n, 2)
            return self.element(torch.cat([c - self.center, r - self.center, kind], -1))

        def post_elements(self, p):
            n = len(p)
            kind = torch.tensor([0.0, 1.0]).expand(n, 2)
            return self.element(torch.cat([p - self.center, torch.zeros_like(p), kind], -1))

        def q(self, pooled):
            mu, logvar = self.posterior(pooled).chunk(2, dim=-1)
            return mu, logvar.clamp(-8.0, 8.0)

        def forward(self, y, z):
            return self.decoder(torch.cat([y - self.center, z], -1)).squeeze(-1)

    return VPLModel(config["embed_dim"], config["hidden"], config["latent"], len(config.get("users", [])))


class VPLReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train vpl`. Options: `encoder_cache`, `adapt`."""

    kind_name = "vpl"
    build = staticmethod(build_vpl)

    def _evidence(self, user: str | None):
        """(sum, count) of the user's stored pair elements: adapted, trained, or nothing."""
        torch = require("torch", "hf")
        if user in self.adapted:
            s, n = self.adapted[user]
            return torch.as_tensor(s), float(n)
        if user in self.users:
            i = self.users[user]
            return self.model.user_sum[i], float(self.model.user_count[i])
        self.counts["unknown_user"] += 1
        return torch.zeros(self.model.hidden), 0.0

    def latents(self, views: Sequence[View]):
        """z = mu(evidence) for each view; 0 (the prior mean) when there is no evidence."""
        torch = require("torch", "hf")
        out = torch.zeros(len(views), self.model.latent)
        for i, (v, shots) in enumerate(zip(views, self.history_states(views))):
            user, posts = self.user_of(v), self.posts_of(v)
            if shots is not None:
                total, n = shots
            elif user is not None:
                total, n = self._evidence(user)
            else:
                total, n = torch.zeros(self.model.hidden), 0.0
            if posts:
                total = total + self.model.post_elements(self._tensor(posts)).sum(0)
                n += len(posts)
            if n == 0:
                self.counts["no_evidence"] += 1
                continue
            out[i] = self.model.q((total / n).unsqueeze(0))[0][0]
        return out

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            z = self.latents([v for v, _ in batch])
            values = self.model(self._tensor([r for _, r in batch]), z)
        return [Score(float(v)) for v in values]

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        """A history view's evidence: the sum and count of its pairs' elements, as `adapt` stores them."""
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            return [(self.model.pair_elements(self._tensor([p.chosen for p in shots]),
                                              self._tensor([p.rejected for p in shots])).sum(0), float(len(shots)))
                    for shots in shot_lists]

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """The user's evidence becomes exactly these labelled pairs (replacing earlier shots)."""
        self.adapted.pop(user, None)
        if not pairs:
            return
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            h = self.model.pair_elements(self._tensor([p.chosen for p in pairs]), self._tensor([p.rejected for p in pairs]))
        self.adapted[user] = (h.sum(0).numpy().copy(), len(pairs))
