"""Assemble the built-in sample benchmark from the hand-written YAML in data/sample-src/.

The YAML is the source of truth (written for this project, reviewed by hand); this script
turns it into the package data: `benchmark.jsonl` (pairs) and `source.jsonl` (the same
items in LaMP-QA form, without chosen/rejected, as input for `prbench build`). Each item's
profile is all of its user's posts, so one user is one consistent person across items.

    python scripts/make_sample.py            # writes src/prbench/data/sample/*.jsonl
    python scripts/make_sample.py --check    # fails if the package data is out of date
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "data" / "sample-src"
DST = ROOT / "src" / "prbench" / "data" / "sample"
ORDER = ("arts.yaml", "lifestyle.yaml", "society.yaml")
SOURCE_FIELDS = ("id", "user_id", "category", "question", "profile", "narrative", "rubric_aspects", "gold_answer")


def build() -> tuple[list[dict], list[dict]]:
    bench: list[dict] = []
    for name in ORDER:
        doc = yaml.safe_load((SRC / name).read_text(encoding="utf-8"))
        users = {u["id"]: u for u in doc["users"]}
        for item in doc["items"]:
            user = users[item["user"]]
            profile = [{"id": f"{user['id']}-p{i:02d}", "category": p["category"], "text": p["text"].strip()}
                       for i, p in enumerate(user["posts"], 1)]
            bench.append({
                "id": item["id"],
                "user_id": user["id"],
                "category": doc["category"],
                "question": item["question"].strip(),
                "profile": profile,
                "narrative": item["narrative"].strip(),
                "rubric_aspects": [{k: a[k].strip() for k in ("aspect", "reason", "evidence")}
                                   for a in item["rubric_aspects"]],
                "gold_answer": item["gold_answer"].strip(),
                "chosen": item["chosen"].strip(),
                "rejected": item["rejected"].strip(),
            })
    source = [{k: rec[k] for k in SOURCE_FIELDS} for rec in bench]
    return bench, source


def render(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records)


def main() -> int:
    bench, source = build()
    outputs = {DST / "benchmark.jsonl": render(bench), DST / "source.jsonl": render(source)}
    if "--check" in sys.argv:
        stale = [str(p) for p, text in outputs.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
        if stale:
            print("out of date: " + ", ".join(stale) + " (run scripts/make_sample.py)")
            return 1
        return 0
    DST.mkdir(parents=True, exist_ok=True)
    for path, text in outputs.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({text.count(chr(10))} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
