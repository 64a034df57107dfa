"""Write the kept pairs in the hosted dataset's layout, with a dataset card, and optionally push them.

Layout under the build folder:
    data/<Category>.parquet   one file per category (what `datasets` and `prbench` load)
    jsonl/<Category>.jsonl    the same records as JSON lines (a separate folder, because a
                              folder holding both would list every record twice to a loader)
    README.md                 the dataset card, with a `configs:` header mapping each category
                              to its parquet file as a `test` split, like the hosted benchmark
All files share one explicit parquet schema, so `datasets.load_dataset("parquet", ...)` can
read several categories at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError
from prbench.schema import CATEGORY_SHORT, Example

FIELDS = {
    "id": "item id (from the source)",
    "question": "the user's question",
    "profile": "the user's past posts: list of {id, category, text}",
    "rubric_aspects": "what this user expects: list of {aspect, evidence, reason} (answer key; never RM input)",
    "narrative": "the user's own description of their need (answer key; never RM input)",
    "category": "config name of the category",
    "user_id": "the user's id when the source has one, else null",
    "chosen": "answer written to meet the rubric aspects",
    "rejected": "answer written to avoid the rubric aspects while staying correct and helpful",
}


def _schema():
    import pyarrow as pa

    post = pa.struct([("id", pa.string()), ("category", pa.string()), ("text", pa.string())])
    aspect = pa.struct([("aspect", pa.string()), ("evidence", pa.string()), ("reason", pa.string())])
    return pa.schema([
        ("id", pa.string()), ("question", pa.string()), ("profile", pa.list_(post)),
        ("rubric_aspects", pa.list_(aspect)), ("narrative", pa.string()), ("category", pa.string()),
        ("user_id", pa.string()), ("chosen", pa.string()), ("rejected", pa.string()),
    ])


def to_row(ex: Example) -> dict[str, Any]:
    """The released fields of one pair (extra source fields are not exported)."""
    return {
        "id": ex.id, "question": ex.question,
        "profile": [{"id": p.id, "category": p.category, "text": p.text} for p in ex.profile],
        "rubric_aspects": [{"aspect": a.aspect, "evidence": a.evidence, "reason": a.reason}
                           for a in ex.rubric_aspects],
        "narrative": ex.narrative, "category": ex.category, "user_id": ex.user_id,
        "chosen": ex.chosen, "rejected": ex.rejected,
    }


def export_dataset(examples: Sequence[Example], out: str | Path) -> dict[str, int]:
    """Write data/<Category>.parquet and jsonl/<Category>.jsonl; returns pairs per category.

    Files of an earlier export are replaced, so a category that lost all its pairs leaves no stale file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    data_dir, jsonl_dir = out / "data", out / "jsonl"
    for d, pattern in ((data_dir, "*.parquet"), (jsonl_dir, "*.jsonl")):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob(pattern):
            old.unlink()
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for ex in examples:
        by_cat.setdefault(ex.category, []).append(to_row(ex))
    for cat, rows in sorted(by_cat.items()):
        pq.write_table(pa.Table.from_pylist(rows, schema=_schema()), data_dir / f"{cat}.parquet")
        with (jsonl_dir / f"{cat}.jsonl").open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return {cat: len(rows) for cat, rows in sorted(by_cat.items())}


def dataset_card(
    counts: Mapping[str, int],
    config: Mapping[str, Any],
    report: Mapping[str, Any],
    report_md: str,
    license_id: str = "apache-2.0",
) -> str:
    """README.md for the built dataset: configs header, fields, sizes, models, rule, statistics, licence."""
    header = ["---", f"license: {license_id}", "language:", "- en", "pretty_name: Personalized reward pairs",
              "configs:"]
    for cat in counts:
        header += [f"- config_name: {cat}", "  data_files:", "  - split: test", f"    path: data/{cat}.parquet"]
    header.append("---")
    total = sum(counts.values())
    sizes = "\n".join(f"| {cat} ({CATEGORY_SHORT.get(cat, cat)}) | {n} |" for cat, n in counts.items())
    fields = "\n".join(f"| `{k}` | {v} |" for k, v in FIELDS.items())
    every = report.get("all", {})
    body = f"""
# Personalized reward pairs

Chosen/rejected answer pairs that differ in how well they fit one particular user, built with
`prbench build` from LaMP-QA-style items (question, the user's past posts, narrative, rubric
aspects). Both answers see the question and the user's top-{config.get('top_k')} profile posts
(retriever `{config.get('retriever')}`); the chosen answer is told the aspects this user expects,
the rejected answer is told to avoid them while staying correct, relevant and helpful. Answers
are limited to {config.get('max_words')} words.

## Sizes

| category | pairs |
|---|---|
{sizes}
| total | {total} |

{every.get('processed', 0)} items were processed, {every.get('kept', 0)} kept, {every.get('dropped', 0)} dropped.

## Fields

| field | meaning |
|---|---|
{fields}

`narrative` and `rubric_aspects` are the answer key: a fair reward-model evaluation never shows
them to the model (except as a deliberate oracle upper bound).

## How it was built

- source: `{config.get('source')}`
- generator: `{config.get('generator')}` (temperature {config.get('temperature')}, top-p {config.get('top_p')},
  seeded per item and role with seed {config.get('seed')})
- validator: `{config.get('validator')}`, scoring each answer 1-5 on factuality, relevance
  (instruction following), helpfulness (harmlessness) and rubric fit
- prompt sha256 (first 16 hex): {', '.join(f'{k} `{v}`' for k, v in (config.get('prompt_hashes') or {}).items())}
- filter: {report.get('rule_text')}

## Statistics

{report_md}
## Loading

```python
import datasets
ds = datasets.load_dataset("parquet", data_files={{"test": "data/*.parquet"}})["test"]
# or with prbench: prbench eval -m baseline:length -d data
```

## Licence

The card declares `{license_id}`, the licence of the published Personalized RewardBench. The
questions, profiles, narratives and rubrics come from the source data and keep its terms; the
answers were written by `{config.get('generator')}`, whose provider's terms of use apply to
generated text. Check both before redistributing.
"""
    return "\n".join(header) + "\n" + body


def push_to_hub(out: str | Path, repo: str, private: bool = False) -> str:
    """Upload README.md and data/ to the Hub dataset `repo`; the token comes from HF_TOKEN only."""
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise PrbenchError("--push-to-hub needs a Hugging Face token in the HF_TOKEN environment variable "
                           "(none is set); the dataset was written locally")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(out), repo_id=repo, repo_type="dataset",
                                 allow_patterns=["README.md", "data/*.parquet"],
                                 commit_message="Upload benchmark built with prbench build")
    except Exception as exc:  # noqa: BLE001 - network, auth and permission errors all end the same way for the user
        raise PrbenchError(f"push to the Hugging Face Hub dataset {repo!r} failed: {type(exc).__name__}: {exc}; "
                           "the dataset was written locally") from None
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/datasets/{repo}")
