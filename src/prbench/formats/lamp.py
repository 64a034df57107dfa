"""`lamp` / `longlamp`: LaMP and LongLaMP personalization tasks as source items.

Sources: github.com/LaMP-Benchmark/LaMP (README "Evaluation": gold files
{"task", "golds": [{"id", "output"}]}; `LaMP/data/datasets.py` reads `input`, `profile`,
`output`; profile items per task in `LaMP/prompts/prompts.py`: `title`, `text`, `abstract`,
`description`, `tag`, `score`, `date`) and github.com/LongLaMP-benchmark/LongLaMP-Benchmark
(`longLaMP/data/datasets.py`: `input`, `profile`, `output`).
Read: `id`, `input`, `profile` (items: `id`, then `title`, `text`, `abstract`, `description`,
`reviewText`, `summary` joined as the post text, `tag` / `category` as its category),
`output` (inline, or from a gold file in the same folder), `user_id` (or `reviewerId`,
`author`, `name`). Each item becomes a `SourceItem` (question = input, gold_answer = output,
no rubric): a source for ICL, gold scoring and policy accuracy, not a pair to judge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError
from prbench.formats.base import Reader, build, text
from prbench.schema import ProfilePost, SourceItem

TEXT_KEYS = ("title", "text", "abstract", "description", "reviewText", "summary")
USER_KEYS = ("user_id", "reviewerId", "author", "name")


def _gold_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("golds"), list) else None


class LaMP(Reader):
    name = "lamp"
    kind = "source"
    headline = "none: source items (no pairs) for ICL, gold scoring and policy accuracy"
    source = "github.com/LaMP-Benchmark/LaMP (README gold format, LaMP/data/datasets.py, LaMP/prompts/prompts.py)"
    fields = "id, input, profile[{id, title|text|abstract|description|reviewText|summary, tag|category}], " \
             "output (or gold file {task, golds[{id, output}]}), user_id|reviewerId|author|name"
    priority = 40
    shapes = (("id", "input", "profile"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "input" in row and isinstance(row.get("profile"), list) and "question" not in row

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, SourceItem]]:
        from prbench.raw import iter_raw

        path = Path(str(src))
        golds: dict[str, str] = {}
        task = None
        files: list[Any] = [src]
        if path.is_dir():
            files = []
            for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(".json")):
                gold = _gold_file(f)
                if gold is None:
                    files.append(f)
                    continue
                task = task or gold.get("task")
                for i, g in enumerate(gold["golds"], 1):
                    if not isinstance(g, dict) or "id" not in g or not isinstance(g.get("output"), str):
                        raise DataError(str(f), i, "golds", "each gold needs an id and an output text")
                    golds[str(g["id"])] = g["output"]
            files += sorted(p for p in path.rglob("*") if p.is_file()
                            and p.name.lower().endswith((".jsonl", ".jsonl.gz", ".parquet")))  # as iter_raw reads
        for f in files:
            for file, line, row in iter_raw(f, split):
                if not isinstance(row, dict):
                    raise DataError(file, line, None, f"a record must be a JSON object, got {type(row).__name__}")
                yield file, line, self.record(row, file, line, golds, task)

    def record(self, row: Mapping[str, Any], file: str, line: int, golds: Mapping[str, str],
               task: str | None) -> SourceItem:
        rid = row.get("id")
        if rid is None or isinstance(rid, bool) or not str(rid).strip():
            raise DataError(file, line, "id", "missing required field")
        rid = str(rid)
        profile = row.get("profile")
        if not isinstance(profile, list):
            raise DataError(file, line, "profile", "must be a list of profile items")
        posts = []
        for i, p in enumerate(profile):
            if not isinstance(p, dict):
                raise DataError(file, line, f"profile[{i}]", "must be an object")
            body = " ".join(str(p[k]).strip() for k in TEXT_KEYS if isinstance(p.get(k), str) and p[k].strip())
            if not body:
                raise DataError(file, line, f"profile[{i}]", f"has no text ({', '.join(TEXT_KEYS)})")
            cat = p.get("tag") or p.get("category") or ""
            posts.append(ProfilePost(id=str(p.get("id", f"{rid}-p{i}")), text=body, category=str(cat)))
        output = row.get("output") if isinstance(row.get("output"), str) else golds.get(rid)
        user = next((str(row[k]) for k in USER_KEYS if row.get(k) not in (None, "")), None)
        return build(SourceItem, file, line, id=rid, question=text(row, "input", file, line), profile=posts,
                     rubric_aspects=[], category=str(row.get("task") or task or self.name), user_id=user,
                     gold_answer=output)


class LongLaMP(LaMP):
    name = "longlamp"
    source = "github.com/LongLaMP-benchmark/LongLaMP-Benchmark (longLaMP/data/datasets.py)"
    priority = 41
