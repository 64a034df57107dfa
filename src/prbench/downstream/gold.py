"""Gold-answer scoring (Pref-LaMP style): compare generations with what the user actually wrote.

Paper B scores personalized generations against ground-truth user completions with ROUGE-1
"and similar". Here, for every item that carries a `gold_answer`:

- `rouge1`, `rougeL`: F1 from the `rouge-score` package with its Porter stemmer
  (`RougeScorer([...], use_stemmer=True)`, default tokenizer: lowercase, alphanumeric tokens).
  Reference = the gold answer, prediction = the generation.
- `embedding`: cosine similarity of the two texts' sentence embeddings (built-in MiniLM,
  `builtin:minilm-l6`, normalised), in [-1, 1].

An empty generation scores 0 on every metric (an answer that says nothing). An item without a
gold answer is *counted* (`n_missing_gold`) and left out of every mean, never scored as 0; an
item without a generation is counted apart (`n_missing_generation`). Means carry seeded
percentile-bootstrap CIs over items; `compare_gold` gives a paired difference of two systems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prbench.errors import PrbenchError
from prbench.runtime.extras import require
from prbench.schema import SourceItem
from prbench.stats import metrics

METRICS = ("rouge1", "rougeL", "embedding")
METRIC_SCALES = {
    "rouge1": "ROUGE-1 F1 against the user's gold answer (stemmed), 0-1",
    "rougeL": "ROUGE-L F1 against the user's gold answer (stemmed), 0-1",
    "embedding": "cosine similarity to the user's gold answer (MiniLM sentence embeddings), -1-1",
}
METRIC_DEFINITIONS = {
    "rouge1": "rouge-score RougeScorer(['rouge1'], use_stemmer=True).score(gold, generation).fmeasure",
    "rougeL": "rouge-score RougeScorer(['rougeL'], use_stemmer=True).score(gold, generation).fmeasure",
    "embedding": "cosine of normalised sentence embeddings of gold and generation (encoder named in the result)",
    "missing": "items without a gold answer are counted in n_missing_gold and excluded, never scored 0",
    "ci": "percentile bootstrap over items, 95%, seeded",
}


@dataclass
class GoldResult:
    """Per-item gold metrics plus their means with bootstrap CIs."""

    per_item: dict[str, dict[str, float]]
    means: dict[str, dict[str, Any]]
    n_items: int
    n_missing_gold: int
    n_missing_generation: int
    encoder: str | None
    missing_gold_ids: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"n_items": self.n_items, "n_scored": len(self.per_item), "n_missing_gold": self.n_missing_gold,
                "n_missing_generation": self.n_missing_generation, "encoder": self.encoder,
                "metrics": self.means, "definitions": {m: METRIC_DEFINITIONS[m] for m in self.means}}

    def mean(self, metric: str = "rouge1") -> float | None:
        return self.means.get(metric, {}).get("mean")


def rouge_f1(golds: Sequence[str], preds: Sequence[str], kinds: Sequence[str] = ("rouge1", "rougeL")) -> list[dict[str, float]]:
    """ROUGE F1 per (gold, prediction) pair, stemmed; an empty prediction scores 0."""
    rouge_scorer = require("rouge_score.rouge_scorer", "gold")
    scorer = rouge_scorer.RougeScorer(list(kinds), use_stemmer=True)
    out = []
    for g, p in zip(golds, preds):
        if not p.strip():
            out.append({k: 0.0 for k in kinds})
            continue
        s = scorer.score(g, p)
        out.append({k: float(s[k].fmeasure) for k in kinds})
    return out


def embedding_similarity(golds: Sequence[str], preds: Sequence[str], encoder: str = "builtin:minilm-l6") -> list[float]:
    """Cosine similarity of each (gold, prediction) pair; an empty prediction scores 0."""
    from prbench.engines.builtin import encode_texts, load_sentence_encoder

    texts = list(dict.fromkeys([t for t in (*golds, *preds) if t.strip()]))
    emb = encode_texts(load_sentence_encoder(encoder), texts)
    row = {t: emb[i] for i, t in enumerate(texts)}
    return [float(np.dot(row[g], row[p])) if p.strip() and g.strip() else 0.0 for g, p in zip(golds, preds)]


def _mean_ci(values: Sequence[float], seed: int, n_boot: int) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    lo, hi = metrics.bootstrap_ci(arr, seed=seed, n_boot=n_boot)
    return {"mean": float(arr.mean()), "ci_low": lo, "ci_high": hi, "n": int(arr.size)}


def score_gold(
    items: Sequence[SourceItem],
    generations: Mapping[str, str],
    *,
    metrics_: Sequence[str] = METRICS,
    encoder: str | None = "builtin:minilm-l6",
    seed: int = 0,
    n_boot: int = 1000,
) -> GoldResult:
    """Score each item's generation against its gold answer (module docstring for the rules).

    `encoder=None` skips the embedding metric (no model load).
    """
    unknown = set(metrics_) - set(METRICS)
    if unknown:
        raise PrbenchError(f"unknown gold metric(s) {', '.join(sorted(unknown))} (use {', '.join(METRICS)})")
    wanted = [m for m in metrics_ if m != "embedding" or encoder]
    missing_gold = [it.id for it in items if not (it.gold_answer or "").strip()]
    no_gen = [it.id for it in items if (it.gold_answer or "").strip() and it.id not in generations]
    scored = [it for it in items if (it.gold_answer or "").strip() and it.id in generations]
    golds = [it.gold_answer or "" for it in scored]
    preds = [generations[it.id] for it in scored]
    per_item: dict[str, dict[str, float]] = {it.id: {} for it in scored}
    kinds = [m for m in wanted if m.startswith("rouge")]
    if kinds and scored:
        for it, row in zip(scored, rouge_f1(golds, preds, kinds)):
            per_item[it.id].update(row)
    if "embedding" in wanted and scored:
        for it, v in zip(scored, embedding_similarity(golds, preds, encoder or "builtin:minilm-l6")):
            per_item[it.id]["embedding"] = v
    means = {m: _mean_ci([per_item[it.id][m] for it in scored], seed, n_boot) for m in wanted}
    return GoldResult(per_item=per_item, means=means, n_items=len(items), n_missing_gold=len(missing_gold),
                      n_missing_generation=len(no_gen), encoder=encoder if "embedding" in wanted else None,
                      missing_gold_ids=missing_gold)


def compare_gold(a: GoldResult, b: GoldResult, metric: str = "rouge1", *, seed: int = 0,
                 n_boot: int = 1000) -> dict[str, Any]:
    """Paired difference a - b of one metric on the items both scored, with a bootstrap CI."""
    shared = sorted(set(a.per_item) & set(b.per_item))
    shared = [i for i in shared if metric in a.per_item[i] and metric in b.per_item[i]]
    if not shared:
        return {"metric": metric, "n": 0, "diff": None, "ci_low": None, "ci_high": None}
    diff = np.array([a.per_item[i][metric] - b.per_item[i][metric] for i in shared], dtype=float)
    lo, hi = metrics.bootstrap_ci(diff, seed=seed, n_boot=n_boot)
    return {"metric": metric, "n": len(shared), "diff": float(diff.mean()), "ci_low": lo, "ci_high": hi,
            "a_better": int(np.sum(diff > 0)), "b_better": int(np.sum(diff < 0)), "equal": int(np.sum(diff == 0))}
