"""`judgebench`: JudgeBench response pairs with an objective label.

Source: github.com/ScalerLab/JudgeBench at e2c52c2 (2024-11-06): README (pair format),
`data/dataset=judgebench,response_model=*.jsonl` rows `pair_id, original_id, source, question,
response_model, response_A, response_B, label` ("A>B" or "B>A"); `run_judge.py` (judges each
pair as (A, B) and, by default, again as (B, A), L27-40; reports per source prefix and overall,
L94-96) and `utils/metrics.py` `compute_final_metrics` (L14-78).

One item per pair (rule `strict`, id = `pair_id`): chosen is the labelled response. JudgeBench's
consistency rule over its two orders: each decision for the labelled response counts +1, each for
the other -1, a tie or a failed judgment 0; the pair is correct when the sum is positive. Its
reward-model judges decide `A>B` only when A scores strictly higher (`utils/judges.py` L473,
L525, L564), so for a pointwise RM the two orders give "correct" exactly when chosen > rejected:
a score tie is wrong, never half. A pairwise judge is read the same way over its verdicts
(`--both-orders` gives JudgeBench's default two games; one order is its `--single_game`).
Headline (`accuracy` and `format_score`): correct pairs / pairs, as a fraction; per source group
(mmlu-pro, livebench-reasoning, livebench-math, livecodebench) as `run_judge.py` prints them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import Reader, build, item_score, row_id, rows, text
from prbench.schema import Example

LABELS = ("A>B", "B>A")
GROUPS = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")  # run_judge.py L94
UPSTREAM = "ScalerLab/JudgeBench@e2c52c2 utils/metrics.py L14-78, run_judge.py L27-40 and L94-96"


def group_of(source: str) -> str:
    return next((g for g in GROUPS if source.startswith(g)), source)


class JudgeBench(Reader):
    name = "judgebench"
    source = "github.com/ScalerLab/JudgeBench README, run_judge.py, utils/metrics.py"
    fields = "pair_id, source, question, response_A, response_B, label (A>B | B>A)"
    headline = ("JudgeBench's: correct pairs / pairs; a pair is correct when its decisions over both orders favour "
                "the labelled response (+1 each, -1 against, tie 0); an RM score tie is wrong")
    priority = 15
    shapes = (("pair_id", "question", "response_A", "response_B", "label"),)

    def __init__(self, rest: str = "", **options: Any):
        super().__init__(rest, **options)
        if rest:
            raise SpecError(f"judgebench: takes no options (got {rest!r})")

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "response_A" in row and "response_B" in row and "label" in row

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        for file, line, row in rows(src, split):
            label = row.get("label")
            if label not in LABELS:
                raise DataError(file, line, "label", f"must be 'A>B' or 'B>A' (got {label!r})")
            a, b = text(row, "response_A", file, line), text(row, "response_B", file, line)
            chosen, rejected = (a, b) if label == "A>B" else (b, a)
            pid = str(row["pair_id"]) if row.get("pair_id") is not None else row_id(src, file, line)
            source = row.get("source")
            yield file, line, build(
                Example, file, line, id=pid, item_id=pid, rule="strict", question=text(row, "question", file, line),
                chosen=chosen, rejected=rejected, category=group_of(source) if isinstance(source, str) else "judgebench",
                profile=[], rubric_aspects=[], format=self.name)

    @classmethod
    def score(cls, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Correct pairs / pairs, overall and per source group (module docstring)."""
        return item_score("JudgeBench accuracy", UPSTREAM, records,
                            "correct pairs / pairs; JudgeBench's two-order consistency rule (a tie is wrong)")

