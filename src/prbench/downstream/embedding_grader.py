"""An offline rubric grader from sentence embeddings: `embedding:<encoder>` (e.g. builtin:minilm-l6).

Per aspect, the cosine similarity between the answer and the aspect's "title. reason" maps
to the paper's 0/1/2 scale: >= `high` (default 0.40) -> 2, >= `low` (0.20) -> 1, else 0;
item score = mean over aspects. On the built-in sample the chosen answers average 0.83 and
the rejected ones 0.59 per aspect, so it separates them, but it measures topical coverage,
not whether an answer really serves the user. It exists so demos and CPU smoke runs have a
grader that works offline (the 135M built-in LLM cannot follow the grading format); publish
numbers graded by a strong LLM (`openai:...`, `hf:...`, `vllm:...`). When an RM uses the
same encoder (`baseline:embedding`), its agreement with this grader is inflated: say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.downstream.grader import Grade, GraderStats
from prbench.schema import SourceItem
from prbench.specs import Kind, model_or_builtin
from prbench.store.cache import content_key


@dataclass
class EmbeddingRubricGrader:
    """Same interface as RubricGrader (grade, key, spec, stats, run_info), no LLM."""

    encoder: str = "builtin:minilm-l6"
    low: float = 0.20
    high: float = 0.40
    stats: GraderStats = field(default_factory=GraderStats)

    @property
    def spec(self) -> str:
        return f"embedding:{self.encoder}"

    def fingerprint(self) -> dict[str, Any]:
        from prbench.engines.builtin import ENCODING  # grades of an earlier encoding are never reused

        return {"grader": self.spec, "low": self.low, "high": self.high, "encoding": ENCODING}

    def key(self, item: SourceItem, response: str) -> str:
        rubric = [(a.aspect, a.reason) for a in item.rubric_aspects]
        return content_key("grade", self.fingerprint(), item.question, response, rubric)

    def grade(self, pairs: Sequence[tuple[SourceItem, str]]) -> list[Grade]:
        from prbench.engines.builtin import encode_texts, load_sentence_encoder

        self.stats.requested += len(pairs)
        texts = list(dict.fromkeys([t for it, r in pairs for t in (r, *self._aspects(it))]))
        self.stats.calls += len(texts)
        emb = dict(zip(texts, encode_texts(load_sentence_encoder(self.encoder), texts)))
        out = []
        for it, resp in pairs:
            if not it.rubric_aspects:
                out.append(Grade([], raw="", error="parse: item has no rubric aspects"))
                continue
            sims = [float(emb[a] @ emb[resp]) for a in self._aspects(it)]
            out.append(Grade([2 if s >= self.high else 1 if s >= self.low else 0 for s in sims],
                             raw=" ".join(f"{s:.3f}" for s in sims)))
        return out

    @staticmethod
    def _aspects(item: SourceItem) -> list[str]:
        return [f"{a.aspect}. {a.reason}".strip() for a in item.rubric_aspects]

    def run_info(self) -> dict[str, Any]:
        return {"grader": self.spec, "low": self.low, "high": self.high, **self.stats.as_dict()}


def _load_embedding_grader(encoder: str, **options: Any) -> EmbeddingRubricGrader:
    """`embedding:<encoder>`; options: `low`, `high` thresholds. Engine-grader options are not for it."""
    known = {k: v for k, v in options.items() if k in ("low", "high")}
    return EmbeddingRubricGrader(encoder or "builtin:minilm-l6", **known)


load_embedding_grader = Kind(_load_embedding_grader, resolve_spec=model_or_builtin)  # builtin:NAME or a folder
