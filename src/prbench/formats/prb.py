"""`prb` (Personalized RewardBench pairs) and `lamp-qa` (its LaMP-QA source items): today's files.

Fields: see `prbench.schema` (`id`, `question`, `profile`, `rubric_aspects`, `narrative`,
`category`, `chosen`, `rejected`; sources have no `chosen` / `rejected`). These two are read
by `prbench.data.loaders` itself, byte-for-byte as before formats existed; the readers here
only claim the shapes for detection and let `--format prb` / `--format lamp-qa` name them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.formats.base import Reader


class PRB(Reader):
    name = "prb"
    kind = "benchmark"
    source = "Personalized RewardBench release (prbench.schema; built-in `sample`)"
    fields = "id, question, profile[{id, category, text}], rubric_aspects[{aspect, reason, evidence}], narrative, " \
             "category, user_id, chosen, rejected"
    priority = 10

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "question" in row and "chosen" in row and "rejected" in row

    def read(self, src: str | Path, split: str = "test") -> Iterator[Any]:
        from prbench.raw import _record_class, iter_raw, parse_record

        for file, line, raw in iter_raw(src, split):
            yield file, line, parse_record(raw, _record_class(self.kind), file, line)


class LampQA(PRB):
    name = "lamp-qa"
    kind = "source"
    headline = "none: source items (no pairs) for ICL, gold scoring and policy accuracy"
    source = "LaMP-QA source items as Personalized RewardBench builds from them (built-in `sample:source`)"
    fields = "id, question, profile[{id, category, text}], rubric_aspects[{aspect, reason, evidence}], narrative, " \
             "category, user_id, gold_answer"
    priority = 11

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "question" in row and "rubric_aspects" in row and "chosen" not in row
