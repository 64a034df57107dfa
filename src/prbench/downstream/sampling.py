"""Policy samples for Best-of-N: the samples folder, its reader and the policy's prompt.

`prbench.capabilities.sample.driver.sample_policy` draws them (N answers per item, once, reused
by every RM); Best-of-N, GRPO's held-out grading and the generation runs read and write the
folder through what is here. The policy sees the question and the top-k profile posts (the
paper: top 10, temperature 1.0, top-p 0.9, at most 100 words), rendered through
`prbench.context.conditions` so the context looks exactly like what RMs see under `profile`.

A samples folder holds `config.json`, `items.jsonl` (the items sampled, with their rubric
for the grader), `samples.jsonl` (one line per item: `id`, `category`, `prompt_hash`,
`samples`: [{`i`, `text`, `finish_reason`, `n_tokens`, `seed`}]) and `summary.json`. Only items
whose N samples all succeeded are written; a re-run retries the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.context.conditions import View
from prbench.engines.base import Messages
from prbench.errors import PrbenchError
from prbench.prompts import Prompt
from prbench.schema import SourceItem
from prbench.sources import load_items
from prbench.store.runs import RunDir, read_json

SAMPLES_FILE = "samples.jsonl"
ITEMS_FILE = "items.jsonl"


def policy_messages(view: View, prompt: Prompt, max_words: int) -> Messages:
    """The policy's chat: the view's user turn (context + question) wrapped in the answer prompt."""
    return [{"role": "user", "content": prompt.render(user_prompt=view.prompt(), max_words=str(max_words))}]


class SamplesDir(RunDir):
    """A RunDir whose append-only record file is `samples.jsonl` (beside the items it samples)."""

    records_file = SAMPLES_FILE
    overwrite_also = (ITEMS_FILE,)


@dataclass
class SampleSet:
    """Samples read back: items in order and their N texts each (complete items only)."""

    path: Path
    config: dict[str, Any]
    items: list[SourceItem]
    samples: dict[str, list[str]]

    @property
    def n(self) -> int:
        return int(self.config["n"])


def read_samples(path: str | Path) -> SampleSet:
    """Read a samples folder (complete items, in items.jsonl order)."""
    p = Path(path)
    if not (p / "config.json").is_file() or not (p / ITEMS_FILE).is_file():
        raise PrbenchError(f"{p} is not a samples folder (run `prbench sample` first)")
    config = read_json(p / "config.json")
    items = load_items(str(p / ITEMS_FILE), any_category=True)
    samples: dict[str, list[str]] = {}
    path = p / SAMPLES_FILE
    lines = path.read_text(encoding="utf-8").split("\n")[:-1] if path.exists() else []  # drop a partial tail
    for rec in (json.loads(line) for line in lines if line.strip()):
        texts = [s["text"] for s in sorted(rec["samples"], key=lambda s: s["i"])]
        if len(texts) != int(config["n"]):
            raise PrbenchError(f"{p / SAMPLES_FILE}: item {rec['id']} has {len(texts)} samples, expected {config['n']}")
        samples[rec["id"]] = texts
    kept = [it for it in items if it.id in samples]
    return SampleSet(p, config, kept, samples)
