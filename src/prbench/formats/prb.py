"""`prb` (Personalized RewardBench pairs) and `lamp-qa` (its LaMP-QA source items): today's files.

Fields: see `prbench.schema` (`id`, `question`, `profile`, `chosen`, `rejected`; optional
`user_id`, `category`, `rubric_aspects`, `narrative`, `split`; sources have no `chosen` / `rejected`). These two are read
by `prbench.data.loaders` itself, byte-for-byte as before formats existed; the readers here
only claim the shapes for detection and let `--format prb` / `--format lamp-qa` name them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from prbench.formats.base import Reader


class PRB(Reader):
    name = "prb"
    kind: ClassVar[Literal["benchmark", "source"]] = "benchmark"
    source = "Personalized RewardBench release (prbench.schema; built-in `sample`)"
    fields = "id, question, profile[text | {id, text, stance, category} | {prompt, chosen, rejected}], chosen, " \
             "rejected; optional: user_id, category, rubric_aspects[{aspect, reason, evidence}], narrative, split"
    priority = 10
    shapes: ClassVar[tuple[tuple[str, ...], ...]] = (("id", "question", "profile", "chosen", "rejected"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        # also prbench's own pair file (user_id, prompt, chosen, rejected: `prbench train` reads it natively)
        return "chosen" in row and "rejected" in row and ("question" in row or ("user_id" in row and "prompt" in row))

    def read(self, src: str | Path, split: str = "test") -> Iterator[Any]:
        from prbench.raw import _record_class, parse_record, split_rows

        for file, line, raw in split_rows(src, split):
            yield file, line, parse_record(raw, _record_class(self.kind), file, line)


class LampQA(PRB):
    name = "lamp-qa"
    kind = "source"
    headline = "none: source items (no pairs) for ICL, gold scoring and policy accuracy"
    source = "LaMP-QA source items as Personalized RewardBench builds from them (built-in `sample:source`)"
    fields = "id, question, profile (as prb); optional: user_id, category, rubric_aspects[{aspect, reason, " \
             "evidence}], narrative, gold_answer"
    priority = 11
    shapes = (("id", "question", "profile"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "question" in row and ("rubric_aspects" in row or "profile" in row) and "chosen" not in row
