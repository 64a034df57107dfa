"""A learned persona space over lexical and stylometric features: `style:<dir>` (`prbench train style`).

Why: frozen sentence embeddings mostly carry topic, and chosen and rejected answers of a persona
pair share their topic, so MiniLM-based methods (LoRe, VPL, PAL) fitted their training users on
real persona text (DSP) and missed unseen ones. *How* a text is written shows in word and
character n-grams and in simple style statistics, which this model reads.

Formula. phi(t) = [tf-idf of word unigrams, word bigrams and character 4-grams over a vocabulary
fitted on the training texts (L2-normalised), 12 stylometric statistics (length, sentence and
word length, punctuation, list markers, pronoun rates, type-token ratio)], standardised by the
training mean and spread: z(t) = (phi(t) - m) / s. A learned map A (d x B, B = `rank`) is the
persona space. The user is u = A^T mean_j z(post_j) over the posts the view shows (0 without
posts: a user-blind RM, every score 0) plus an offset delta_u (0 unless fitted on k labelled
pairs with A frozen and an L2 pull `offset_l2`). r(u, y) = u . A^T z(y).
Training: Bradley-Terry on the training pairs' margins u . A^T (z(c) - z(r)) under the views of
`condition`, full batch, plus `l2` ||A||^2; nothing per training user is stored but their names.
Under `history` the shown pairs are shots: delta is fitted on them (no posts, so no prior).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from prbench.rewards.base import Score
from prbench.rewards.heads import HeadReward
from prbench.rewards.pal import torch_threads
from prbench.runtime.extras import require

ENCODER_NAME = "prbench:style-features"  # what `config['encoder']` says: no sentence encoder is loaded
N_STYLE = 12
_TOKEN = re.compile(r"[a-z']+|[0-9]+|[^\sa-z0-9]")
_LIST = re.compile(r"^\s*(\d+\.|-|\*)", re.MULTILINE)


def grams(text: str) -> list[str]:
    words = _TOKEN.findall(text.lower())
    flat = " ".join(text.lower().split())
    return ([f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in itertools.pairwise(words)]
            + [f"c:{flat[i:i + 4]}" for i in range(len(flat) - 3)])


def stylometry(text: str) -> np.ndarray:
    """Twelve scale-free style statistics of one text (rates per token, so length is one feature of its own)."""
    toks = _TOKEN.findall(text.lower())
    n = max(len(toks), 1)
    words = [t for t in toks if t.isalpha()]
    sentences = max(1, len(re.findall(r"[.!?]+", text)))
    rate = lambda ws: sum(t in ws for t in toks) / n
    return np.array([
        math.log1p(len(text)), len(words) / sentences / 30, float(np.mean([len(w) for w in words])) / 6 if words else 0.0,
        50 * text.count("!") / n, 50 * text.count("?") / n, 20 * text.count("\n") / n, 10 * text.count(",") / n,
        20 * len(_LIST.findall(text)) / n, 20 * rate({"i", "me", "my"}), 20 * rate({"you", "your"}),
        20 * rate({"we", "our", "us"}), len(set(words)) / max(len(words), 1)], dtype=np.float32)


class StyleFeatures:
    """phi(t): tf-idf over a fitted n-gram vocabulary, then the stylometric statistics; memoised per text."""

    def __init__(self, vocab: Sequence[str], idf: Sequence[float]):
        self.vocab = {g: i for i, g in enumerate(vocab)}
        self.idf = np.asarray(idf, dtype=np.float32)
        self.memo: dict[str, np.ndarray] = {}

    @classmethod
    def fit(cls, texts: Sequence[str], size: int, min_df: int = 3) -> StyleFeatures:
        texts = list(dict.fromkeys(texts))
        df = Counter(g for t in texts for g in set(grams(t)))
        keep = sorted((g for g, c in df.items() if c >= min_df), key=lambda g: (-df[g], g))[:size]
        return cls(keep, [math.log((1 + len(texts)) / (1 + df[g])) + 1 for g in keep])

    @property
    def dim(self) -> int:
        return len(self.vocab) + N_STYLE

    def one(self, text: str) -> np.ndarray:
        row = np.zeros(self.dim, dtype=np.float32)
        for g, c in Counter(g for g in grams(text) if g in self.vocab).items():
            j = self.vocab[g]
            row[j] = (1 + math.log(c)) * self.idf[j]
        norm = float(np.linalg.norm(row))
        if norm:
            row /= norm
        row[len(self.vocab):] = stylometry(text)
        return row

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        for t in texts:
            if t not in self.memo:
                self.memo[t] = self.one(t)
        return np.stack([self.memo[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)


def build_style(config: dict[str, Any]):
    torch = require("torch", "hf")
    nn = torch.nn

    torch_module: Any = nn.Module  # torch is imported lazily: mypy takes the base as Any

    class StyleModel(torch_module):
        """Standardisation buffers and the persona map A."""

        def __init__(self, dim: int, rank: int):
            super().__init__()
            self.rank = rank
            self.register_buffer("mean", torch.zeros(dim))
            self.register_buffer("spread", torch.ones(dim))
            self.proj = nn.Parameter(torch.randn(dim, rank) * 0.01)

        def space(self, phi):
            """A^T z(phi): texts (or mean post features, already standardised: see `user`) in the persona space."""
            return ((phi - self.mean) / self.spread) @ self.proj

        def user(self, post_mean, has_posts):
            return self.space(post_mean) * has_posts.unsqueeze(-1).to(post_mean.dtype)

    return StyleModel(config["feature_dim"], config["rank"])


def fit_delta(prior, diffs, owner, n_owners: int, *, steps: int, lr: float, l2: float):
    """Offsets (n_owners, B) minimising BT(margin = (prior + delta_owner) . diff) + l2 ||delta||^2; zero start, Adam."""
    torch = require("torch", "hf")
    delta = torch.zeros(n_owners, diffs.shape[1], requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)
    counts = torch.bincount(owner, minlength=n_owners).clamp(min=1).to(diffs.dtype)
    with torch.enable_grad():
        for _ in range(steps):
            margin = ((prior + delta[owner]) * diffs).sum(-1)
            per = torch.zeros(n_owners).index_add(0, owner, -torch.nn.functional.logsigmoid(margin)) / counts
            loss = per.sum() + l2 * (delta**2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return delta.detach()


class StyleReward(HeadReward):
    """Scores (view, response) with a folder written by `prbench train style`.

    Options: `adapt` (a pairs file: its unseen users are fitted at load), `adapt_steps` (100),
    `adapt_lr` (0.05), `adapt_l2` (the trained `offset_l2` by default).
    """

    kind_name = "style"
    build = staticmethod(build_style)

    def __init__(self, path: str, spec: str | None = None, adapt_steps: int = 100, adapt_lr: float = 0.05,
                 adapt_l2: float | None = None, **options: Any):
        self.adapt_steps, self.adapt_lr, self._l2 = adapt_steps, adapt_lr, adapt_l2
        self.features: StyleFeatures | None = None
        super().__init__(path, spec, **options)

    def _tensor(self, texts: Sequence[str]):
        torch = require("torch", "hf")
        if self.features is None:
            self.features = StyleFeatures(self.config["vocab"], self.config["idf"])
        return torch.from_numpy(self.features(list(texts)))

    @property
    def adapt_l2(self) -> float:
        return self._l2 if self._l2 is not None else float(self.config.get("offset_l2", 1.0))

    def _prior(self, post_lists: Sequence[Sequence[str]]):
        torch = require("torch", "hf")
        flat = [t for ps in post_lists for t in ps]
        table = self._tensor(flat)
        mean = torch.stack([table[i - len(ps):i].mean(0) if ps else torch.zeros(table.shape[1])
                            for i, ps in zip(np.cumsum([len(ps) for ps in post_lists]), post_lists)]) \
            if post_lists else torch.zeros(0, table.shape[1])
        has = torch.tensor([bool(ps) for ps in post_lists])
        with torch.no_grad():
            return self.model.user(mean, has)

    def users_vec(self, views):
        """Each view's user in the persona space: the posts' prior plus a fitted offset (module docstring)."""
        torch = require("torch", "hf")
        posts = [self.posts_of(v) for v in views]
        self.counts["no_evidence"] += sum(1 for v, p in zip(views, posts) if not p and self.user_of(v) is None)
        out = self._prior(posts)
        for i, (v, shots) in enumerate(zip(views, self.history_states(views))):
            u = self.user_of(v)
            if shots is not None:
                out[i] = out[i] + shots
            elif u in self.adapted:
                out[i] = out[i] + torch.as_tensor(self.adapted[u])
            elif u not in self.users:
                self.counts["unknown_user"] += 1
        return out

    def score(self, batch: Sequence[tuple[Any, str]]) -> list[Score]:
        if not batch:
            return []
        torch = require("torch", "hf")
        with torch.no_grad(), torch_threads():
            user = self.users_vec([v for v, _ in batch])
            values = (user * self.model.space(self._tensor([r for _, r in batch]))).sum(-1)
        return [Score(float(v)) for v in values]

    def _fit(self, priors, shot_lists, l2: float):
        torch = require("torch", "hf")
        flat = [p for shots in shot_lists for p in shots]
        owner = torch.tensor([i for i, shots in enumerate(shot_lists) for _ in shots], dtype=torch.long)
        with torch.no_grad():
            diffs = self.model.space(self._tensor([p.chosen for p in flat])) - self.model.space(
                self._tensor([p.rejected for p in flat]))
        with torch_threads():
            return fit_delta(priors[owner], diffs, owner, len(shot_lists),
                             steps=self.adapt_steps, lr=self.adapt_lr, l2=l2)

    def fit_shots(self, shot_lists: Sequence[Sequence[Any]]) -> list[Any]:
        torch = require("torch", "hf")
        return list(self._fit(torch.zeros(len(shot_lists), self.model.rank), shot_lists, self.adapt_l2))

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """Fit `user`'s offset on their labelled pairs (A frozen; the profile prior of each pair stays under it)."""
        self.adapted.pop(user, None)
        if not pairs:
            return
        from prbench.context.conditions import pair_views

        views = pair_views(pairs, self.config.get("condition", "profile"), retriever=self.config.get("retriever", "bm25"),
                           top_k=self.config.get("top_k", 10))
        prior = self._prior([self.posts_of(v) for v in views]).mean(0, keepdim=True)
        self.adapted[user] = self._fit(prior, [list(pairs)], self.adapt_l2)[0].numpy().copy()

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "shots": [self.adapt_steps, self.adapt_lr, self.adapt_l2]}
