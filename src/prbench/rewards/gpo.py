"""GPO (group preference optimization, Zhao et al. 2024) over a frozen sentence encoder: `gpo:<dir>`.

Formula. A small transformer reads a user's evidence *in context* and scores new responses.
Tokens (width `dim`): a labelled pair (c, r) is t = g_pair([phi(c) - m, phi(r) - m]); a shown
profile post p (our addition, so a profile alone says something) is t = g_post(phi(p) - m); a
learned token `start` is always present; a query response y is t = g_query(phi(y) - m). Every
token attends to the evidence tokens and itself only (queries never see each other), `layers`
layers of `heads` heads; the query's output through a linear head is r(y | evidence).
Meta-training over training users: each step draws, per user, 0..`max_shots` of their pairs as
context (posts dropped with probability `post_dropout`) and their other pairs as targets; loss
BT(targets). Nothing per user is stored but the pairs themselves: a training or adapted user's
context is their pairs (at most `max_shots`, fixed seeded pick), a new user's is empty (k = 0)
plus the posts the view shows. Under `history` the shown pairs are the context.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import torch_threads
from prbench.runtime.extras import require


def build_gpo(config: dict[str, Any]):
    torch = require("torch", "hf")
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class GPOModel(torch_module):
        def __init__(self, emb: int, dim: int, heads: int, layers: int):
            super().__init__()
            self.dim = dim
            self.pair_in = nn.Sequential(nn.Linear(2 * emb, dim), nn.GELU(), nn.Linear(dim, dim))
            self.post_in = nn.Sequential(nn.Linear(emb, dim), nn.GELU(), nn.Linear(dim, dim))
            self.query_in = nn.Sequential(nn.Linear(emb, dim), nn.GELU(), nn.Linear(dim, dim))
            self.start = nn.Parameter(torch.zeros(1, dim))
            layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(dim, 1)
            self.register_buffer("center", torch.zeros(emb))

        def context(self, c, r, posts):
            """Evidence tokens (n_ctx, dim): start, then pairs, then posts (embeddings, uncentred)."""
            parts = [self.start]
            if len(c):
                parts.append(self.pair_in(torch.cat([c - self.center, r - self.center], -1)))
            if len(posts):
                parts.append(self.post_in(posts - self.center))
            return torch.cat(parts)

        def forward(self, ctx, y):
            """Rewards of queries y (n, emb) given one user's evidence tokens ctx (m, dim)."""
            m, n = len(ctx), len(y)
            tokens = torch.cat([ctx, self.query_in(y - self.center)]).unsqueeze(0)
            mask = torch.ones(m + n, m + n, dtype=torch.bool)
            mask[:, :m] = False  # everyone sees the evidence
            idx = torch.arange(m, m + n)
            mask[idx, idx] = False  # a query sees itself
            return self.head(self.body(tokens, mask=mask)[0, m:]).squeeze(-1)

    return GPOModel(config["embed_dim"], config["dim"], config["heads"], config["layers"])


class GPOReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train gpo` (options: `adapt`, a pairs file)."""

    kind_name = "gpo"
    build = staticmethod(build_gpo)

    def __init__(self, path: str, spec: str | None = None, **options: Any):
        super().__init__(path, spec, **options)
        self.stored = {u: [tuple(x) for x in shots] for u, shots in self.config.get("contexts", {}).items()}

    def _pick(self, user: str, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        pairs = list(pairs)
        limit = int(self.config.get("max_shots", 8))
        return pairs if len(pairs) <= limit else random.Random(f"gpo:{user}").sample(pairs, limit)

    def _shots_of(self, view, shots) -> list[tuple[str, str]]:
        u = self.user_of(view)
        if shots is not None:
            return shots
        if u in self.adapted:
            return self.adapted[u]
        if u in self.stored:
            return self.stored[u]
        if u is not None:
            self.counts["unknown_user"] += 1
        return []

    def score(self, batch: Sequence[tuple[Any, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        views = [v for v, _ in batch]
        groups: dict[str, list[int]] = {}
        contexts: dict[str, tuple] = {}
        for i, (v, shots) in enumerate(zip(views, self.history_states(views))):
            shown = tuple(self._shots_of(v, shots))
            posts = tuple(self.posts_of(v))
            key = repr((shown, posts))
            groups.setdefault(key, []).append(i)
            contexts[key] = (shown, posts)
        values = [0.0] * len(batch)
        with torch.no_grad(), torch_threads():
            for key, idx in groups.items():
                shown, posts = contexts[key]
                ctx = self.model.context(self._tensor([c for c, _ in shown]), self._tensor([r for _, r in shown]),
                                         self._tensor(list(posts)))
                out = self.model(ctx, self._tensor([batch[i][1] for i in idx]))
                for i, v in zip(idx, out.tolist()):
                    values[i] = float(v)
        return [Score(v) for v in values]

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        return [[(p.chosen, p.rejected) for p in shots][-int(self.config.get("max_shots", 8)):] for shots in shot_lists]

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """`user`'s context becomes their labelled pairs (no gradient step: GPO adapts in context)."""
        self.adapted.pop(user, None)
        if pairs:
            self.adapted[user] = self._pick(user, [(p.chosen, p.rejected) for p in pairs])
