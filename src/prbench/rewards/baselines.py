"""Baselines that stand beside every model on a leaderboard.

- `length`: prefers the longer response (word count): the classic RM bias.
- `short`: prefers the shorter response.
- `random`: a uniform score seeded by (seed, example id, response): a chance reference.
- `lexical`: BM25 of the response (as query) against what the condition shows: profile
  posts or rubric aspects; under `none`, against the question.
- `embedding`: mean cosine similarity (built-in MiniLM by default) of the response to each
  shown profile post or aspect; under `none`, to the question.
`lexical` and `embedding` are real personalized scorers: they read the user context.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from prbench.context.conditions import View
from prbench.errors import SpecError
from prbench.rewards.base import PointwiseRM, Score
from prbench.specs import Kind, RMOptions

_TOKEN = re.compile(r"[a-z0-9]+")


def context_units(view: View) -> list[str]:
    """The separate pieces of user context shown (aspects, posts, preferred answers, persona), else the question."""
    if view.aspects:
        return [f"{a.aspect}. {a.reason}".strip() for a in view.aspects]
    return view.context_texts() or [view.question]


class LengthRM(PointwiseRM):
    calls_model, is_control, uses_context = False, True, False

    def __init__(self, sign: float = 1.0, spec: str = "baseline:length"):
        self.sign, self.spec = sign, spec

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        return [Score(self.sign * len(resp.split())) for _, resp in batch]


class RandomRM(PointwiseRM):
    spec = "baseline:random"
    calls_model, is_control, uses_context = False, True, False

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fingerprint(self) -> dict:
        return {"spec": self.spec, "seed": self.seed}

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        out = []
        for view, resp in batch:
            h = hashlib.sha256(f"{self.seed}:{view.example_id}:{resp}".encode()).digest()
            out.append(Score(int.from_bytes(h[:8], "big") / 2**64))
        return out


class LexicalRM(PointwiseRM):
    spec = "baseline:lexical"
    calls_model, is_control = False, True

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        import bm25s

        out = []
        for view, resp in batch:
            units = context_units(view)
            corpus = bm25s.tokenize(units, stopwords="en", show_progress=False)
            query = [t for t in _TOKEN.findall(resp.lower()) if t in corpus.vocab]
            if not query:  # no shared word, or no indexable word at all (empty vocabulary)
                out.append(Score(0.0))
                continue
            index = bm25s.BM25()
            index.index(corpus, show_progress=False)
            out.append(Score(float(np.sum(index.get_scores(query)))))
        return out


class EmbeddingRM(PointwiseRM):
    calls_model, is_control = False, True  # a small local encoder: no model calls to budget

    def __init__(self, encoder: str = "builtin:minilm-l6"):
        self.encoder = encoder
        self.spec = self.name_for(encoder)

    @staticmethod
    def name_for(encoder: str) -> str:
        """The spec (and name) of the baseline over `encoder`, known before it is built."""
        return "baseline:embedding" if encoder == "builtin:minilm-l6" else f"baseline:embedding@{encoder}"

    def fingerprint(self) -> dict:
        from prbench.engines.builtin import ENCODING  # cached scores of an earlier encoding are never reused
        from prbench.fingerprint import local_digest

        return {"spec": self.spec, "encoder": self.encoder, "encoder_weights": local_digest(self.encoder),
                "encoding": ENCODING}

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        from prbench.engines.builtin import encode_texts, load_sentence_encoder

        texts = list(dict.fromkeys([t for view, resp in batch for t in (resp, *context_units(view))]))
        emb = encode_texts(load_sentence_encoder(self.encoder), texts)  # batch-invariant scores
        row = {t: emb[i] for i, t in enumerate(texts)}
        out = []
        for view, resp in batch:
            ctx = np.stack([row[t] for t in context_units(view)])
            out.append(Score(float((ctx @ row[resp]).mean())))
        return out


BASELINES: dict[str, type[PointwiseRM]] = {"length": LengthRM, "short": LengthRM, "random": RandomRM, "lexical": LexicalRM,
             "embedding": EmbeddingRM}


def _load_baseline(name: str, seed: int = 0, encoder: str | None = None, **_: object) -> PointwiseRM:
    """Build a baseline by name (see module docstring)."""
    if name == "length":
        return LengthRM(1.0, "baseline:length")
    if name == "short":
        return LengthRM(-1.0, "baseline:short")
    if name == "random":
        return RandomRM(seed)
    if name == "lexical":
        return LexicalRM()
    if name == "embedding":
        return EmbeddingRM(encoder or "builtin:minilm-l6")
    raise SpecError(f"unknown baseline {name!r} (use {', '.join(BASELINES)})")


def baseline_class(name: str) -> type[PointwiseRM]:
    """The class `baseline:<name>` builds (for capabilities, without building it)."""
    kind = name.split("@", 1)[0]
    if kind not in BASELINES:
        close = difflib.get_close_matches(kind, list(BASELINES), n=1)
        hint = f"; did you mean 'baseline:{close[0]}'?" if close else ""
        raise SpecError(f"unknown baseline {name!r} (use {', '.join(BASELINES)}){hint}")
    return BASELINES[kind]


class BaselineOptions(RMOptions):
    encoder: str | None = None  # baseline:embedding's sentence encoder (default builtin:minilm-l6)


def _baseline_spec(rest: str, root: Path) -> str:
    baseline_class(rest)  # an unknown baseline is refused with the closest name
    return rest


def _baseline_run_name(rest: str, encoder: str | None = None, **_: object) -> str:
    return EmbeddingRM.name_for(encoder or "builtin:minilm-l6") if rest == "embedding" else f"baseline:{rest}"


load_baseline = Kind(_load_baseline, model_class=baseline_class, options_model=BaselineOptions,
                     resolve_spec=_baseline_spec, run_name=_baseline_run_name)
