"""Rank a user's profile posts by relevance to the question (the paper keeps the top 10).

Retrievers are named by spec: `bm25` (default, no model), `dense:<sentence-transformers dir | id
| builtin:minilm-l6>`, `contriever:<dir | id>` (mean-pooled AutoModel, dot product, as the
paper's facebook/contriever-msmarco). Rankings are cached per (retriever, question, profile).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from prbench.errors import SpecError
from prbench.registry import RETRIEVERS
from prbench.schema import ProfilePost
from prbench.store.cache import Cache, NullCache, content_key

_TOKEN = re.compile(r"[a-z0-9]+")


class Retriever(ABC):
    """Scores posts against a question; higher is more relevant."""

    spec: str

    @abstractmethod
    def scores(self, question: str, texts: Sequence[str]) -> np.ndarray: ...

    def cache_id(self) -> str:
        """What rankings are cached under: the spec, plus anything else that changes the scores."""
        return self.spec

    def rank(self, question: str, posts: Sequence[ProfilePost], cache: Cache | None = None) -> list[int]:
        """Post indices, most relevant first; ties keep profile order (stable)."""
        if not posts:
            return []
        cache = cache or NullCache()
        key = content_key("rank", self.cache_id(), question, [p.search_text for p in posts])
        hit = cache.get(key)
        if hit is not None:
            return hit
        s = np.asarray(self.scores(question, [p.search_text for p in posts]), dtype=float)
        order = [int(i) for i in np.argsort(-s, kind="stable")]
        cache.put(key, order)
        return order

    def top_k(self, question: str, posts: Sequence[ProfilePost], k: int, cache: Cache | None = None) -> list[ProfilePost]:
        """The k most relevant posts, each kept whole with its own id."""
        return [posts[i] for i in self.rank(question, posts, cache)[:k]]


class BM25Retriever(Retriever):
    """Okapi BM25 (bm25s) over the user's own posts, English stopwords removed."""

    spec = "bm25"

    def __init__(self, rest: str = ""):
        if rest:
            raise SpecError(f"retriever bm25 takes no argument, got bm25:{rest}")

    def scores(self, question: str, texts: Sequence[str]) -> np.ndarray:
        import bm25s

        corpus = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
        vocab = corpus.vocab
        query = [t for t in _TOKEN.findall(question.lower()) if t in vocab]
        if not query:  # also when no post has an indexable word (an empty vocabulary cannot be indexed)
            return np.zeros(len(texts))
        index = bm25s.BM25()
        index.index(corpus, show_progress=False)
        return np.asarray(index.get_scores(query))


class DenseRetriever(Retriever):
    """Cosine similarity of sentence-transformers embeddings (e.g. the built-in MiniLM)."""

    def __init__(self, model: str):
        self.spec = f"dense:{model}"
        self.model = model

    def cache_id(self) -> str:
        from prbench.engines.builtin import ENCODING  # rankings of an earlier encoding are never read back

        return f"{self.spec}:{ENCODING}"

    def scores(self, question: str, texts: Sequence[str]) -> np.ndarray:
        from prbench.engines.builtin import encode_texts, load_sentence_encoder

        enc = load_sentence_encoder(self.model)
        q, d = encode_texts(enc, [question]), encode_texts(enc, texts)  # batch-invariant: a rank never depends on neighbours
        return (d @ q.T)[:, 0]


class ContrieverRetriever(Retriever):
    """Contriever-style: mean-pooled token states of an AutoModel, dot product (no normalisation)."""

    def __init__(self, model: str):
        self.spec = f"contriever:{model}"
        self.model = model

    def scores(self, question: str, texts: Sequence[str]) -> np.ndarray:
        import torch

        tok, enc = _auto_encoder(self.model)

        def embed(batch: list[str]) -> torch.Tensor:
            x = tok(batch, padding=True, truncation=True, max_length=512, return_tensors="pt")
            with torch.no_grad():
                h = enc(**x).last_hidden_state
            m = x["attention_mask"].unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1).clamp(min=1)

        q = embed([question])
        d = torch.cat([embed([t]) for t in texts]) if texts else q[:0]  # alone: no padding, rank batch-invariant
        return (d @ q.T)[:, 0].float().numpy()


@lru_cache(maxsize=2)
def _auto_encoder(model: str) -> tuple[Any, Any]:
    from prbench.runtime.extras import require

    transformers = require("transformers", "hf")
    return (transformers.AutoTokenizer.from_pretrained(model),
            transformers.AutoModel.from_pretrained(model).eval())


def load_retriever(spec: str = "bm25") -> Retriever:
    """Build a retriever from its spec string (`bm25`, `dense:<model>`, `contriever:<model>`, plug-ins)."""
    prefix, _, rest = spec.partition(":")
    if prefix in ("dense", "contriever") and not rest:
        raise SpecError(f"retriever {prefix} needs a model: {prefix}:<model>")
    return RETRIEVERS.build(spec)
