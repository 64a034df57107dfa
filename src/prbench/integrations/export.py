"""The prompt datasets OpenRLHF and verl train on, with the user context the reward needs.

Each row's prompt is the policy's chat (question plus the top-k profile posts, exactly as
`prbench sample` and `prbench rl` show it: `prbench.downstream.sampling.policy_messages`), and
each row carries the user context of `prbench.serve.items` for the reward side:

- OpenRLHF (JSONL): `{"prompt": [chat messages], "label": "<JSON context>", "datasource": "prbench"}`;
  train with `--data.input_key prompt --data.label_key label --data.apply_chat_template`.
- verl (parquet): `data_source`, `prompt` (chat messages), `ability`, `reward_model`
  (`style`, `ground_truth` = item id) and `extra_info` (`id`, `index`, `question`, `profile`;
  `rubric_aspects` under the oracle condition), the columns verl 0.9.1's `RLHFDataset` and
  `NaiveRewardManager` read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prbench.context.conditions import build_views
from prbench.context.retrieval import load_retriever
from prbench.downstream.sampling import policy_messages
from prbench.errors import PrbenchError
from prbench.prompts import load_prompt
from prbench.schema import SourceItem
from prbench.serve.items import item_context

DATA_SOURCE = "prbench"
REWARD_CONDITIONS = ("none", "profile", "planner", "oracle")


def _prompts(items: Sequence[SourceItem], policy_condition: str, top_k: int, retriever: str,
             max_words: int, seed: int) -> list[list[dict[str, str]]]:
    if policy_condition not in ("none", "profile"):
        raise PrbenchError("the policy sees 'profile' or 'none' (never the rubric)")
    views = build_views(items, policy_condition, retriever=load_retriever(retriever), top_k=top_k, seed=seed)
    prompt = load_prompt("policy_answer")
    return [policy_messages(v, prompt, max_words) for v in views]


def _check(items: Sequence[SourceItem], condition: str) -> None:
    if condition not in REWARD_CONDITIONS:
        raise PrbenchError(f"reward condition must be one of {', '.join(REWARD_CONDITIONS)}, got {condition!r}")
    if not items:
        raise PrbenchError("no items to export")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise PrbenchError("duplicate item ids: every row's label must name one item")


def openrlhf_rows(items: Sequence[SourceItem], *, condition: str = "profile", policy_condition: str = "profile",
                  top_k: int = 10, retriever: str = "bm25", max_words: int = 100, seed: int = 0) -> list[dict]:
    _check(items, condition)
    prompts = _prompts(items, policy_condition, top_k, retriever, max_words, seed)
    return [{"prompt": p, "label": json.dumps(item_context(it, condition), ensure_ascii=False),
             "datasource": DATA_SOURCE} for it, p in zip(items, prompts)]


def verl_rows(items: Sequence[SourceItem], *, condition: str = "profile", policy_condition: str = "profile",
              top_k: int = 10, retriever: str = "bm25", max_words: int = 100, seed: int = 0) -> list[dict]:
    _check(items, condition)
    prompts = _prompts(items, policy_condition, top_k, retriever, max_words, seed)
    rows = []
    for i, (it, p) in enumerate(zip(items, prompts)):
        info: dict[str, Any] = {"index": i, **item_context(it, condition)}
        rows.append({"data_source": DATA_SOURCE, "prompt": p, "ability": "personalized-answer",
                     "reward_model": {"style": "model", "ground_truth": it.id}, "extra_info": info})
    return rows


def write_jsonl(rows: Sequence[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def write_parquet(rows: Sequence[dict], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
    tmp.replace(path)
    return path
