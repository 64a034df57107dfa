"""`rmb`: RMB (Reward Model Benchmark), its pairwise set and its best-of-N set.

Source: github.com/Zhou-Zoey/RMB-Reward-Model-Benchmark at 2be3180 (2025-03-25): data
`RMB_dataset/Pairwise_set/**.json` (arrays of `pair_uid, conversation_input[{role, content,
language}], chosen{llm_name, answer}, reject{llm_name, answer}, category_path`) and
`RMB_dataset/BoN_set/**.json` (`bon_uid, conversation_input, bon_best{llm_name, answer},
loser_list[{llm_name, answer}], category_path`); `eval/scripts/my_run_rm.py` (a pair is correct
when chosen scores strictly higher, L324 and L395-398; accuracy = correct / pairs over every
pair given, L420) and `eval/scripts/my_utils/utils.py` (prompt = `conversation_input`, then the
answer, L366-380). The repository ships no best-of-N scorer ("coming soon"); its rule is the
paper's (arXiv 2410.09893, its best-of-N evaluation): an item counts only when the best answer
scores above every loser.

The two sets share one format name and are told apart by the record shape. A pairwise row is
one item (rule `strict`, id `pair_uid`); a best-of-N row is one item of one pair per loser
(rule `beats-all`, ids `bon_uid#c0-rJ`). One source holds one set: a folder mixing them is
refused with both files named (score each set in its own run). The dialogue before the last
user turn is `context`, that turn the `question`; `category` is `category_path`. A row with an
empty answer or turn is a located error; `rmb:skip` leaves such rows out, counted (RMB scores
them: 7 rows in the 95 data files read at 2be3180, 2 in Pairwise_set/Harmlessness/S5.json and
5 in Pairwise_set/Helpfulness/Translation/GeneralExcerpt Language Translation.json).
Headline (`accuracy` and `format_score`): items counted correct / items, a score tie wrong.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import (
    Reader,
    Skips,
    build,
    item_score,
    messages,
    row_id,
    rows,
    split_last_user,
    text,
)
from prbench.schema import Example

UPSTREAM = ("Zhou-Zoey/RMB-Reward-Model-Benchmark@2be3180 eval/scripts/my_run_rm.py L324, L395-398, L420; "
            "best-of-N: the paper, arXiv 2410.09893 (no scorer in the repository)")


def shape_of(row: Mapping[str, Any]) -> str | None:
    if "chosen" in row and "reject" in row:
        return "pairwise"
    if "bon_best" in row and "loser_list" in row:
        return "best-of-n"
    return None


def _answer(value: Any, file: str, line: int, field: str) -> str:
    if not isinstance(value, dict):
        raise DataError(file, line, field, f"must be an object with llm_name and answer (got {type(value).__name__})")
    return text(value, "answer", file, line, field=f"{field}.answer")


class RMB(Reader):
    name = "rmb"
    source = "github.com/Zhou-Zoey/RMB-Reward-Model-Benchmark RMB_dataset/, eval/scripts/my_run_rm.py"
    fields = ("conversation_input[{role, content}], chosen{answer}, reject{answer}, pair_uid | bon_best{answer}, "
              "loser_list[{answer}], bon_uid; category_path")
    headline = ("RMB's: pairwise set, correct pairs / pairs (chosen scores strictly higher); best-of-N set, items "
                "whose best answer beats every loser / items; a tie is wrong")
    priority = 16
    shapes = (("pair_uid", "conversation_input", "chosen", "reject"), ("bon_uid", "conversation_input", "bon_best", "loser_list"))
    syntax = "rmb[:skip]"

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "conversation_input" in row and shape_of(row) is not None

    def __init__(self, rest: str = "", **options: Any):
        super().__init__(rest, **options)
        if rest not in ("", "skip"):
            raise SpecError(f"rmb: unknown option {rest!r} (use rmb or rmb:skip)")

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        first: tuple[str, str, int] | None = None  # (shape, file, line) of the first row
        skips = Skips(self.rest == "skip")
        for file, line, row in rows(src, split):
            shape = shape_of(row)
            if shape is None:
                raise DataError(file, line, None, "neither an RMB pair (chosen, reject) nor a best-of-N item "
                                                  "(bon_best, loser_list)")
            first = first or (shape, file, line)
            if shape != first[0]:
                raise DataError(file, line, None, f"a {shape} row after {first[0]} rows ({first[1]}:{first[2]}): "
                                                  "score RMB's pairwise and best-of-N sets in separate runs")
            yield from ((file, line, ex) for ex in skips.keep(self._examples, row, shape, file, line,
                                                                 row_id(src, file, line)) or ())
        skips.report(self.name, src)

    def _examples(self, row: Mapping[str, Any], shape: str, file: str, line: int, default_id: str) -> list[Example]:
        """The row's pairs, all validated before any is kept (a malformed row is left out whole under :skip)."""
        context, question = split_last_user(messages(row.get("conversation_input"), file, line, "conversation_input"),
                                            file, line, "conversation_input")
        common = {"question": question, "context": context, "category": text(row, "category_path", file, line),
                  "profile": [], "rubric_aspects": [], "format": self.name}
        if shape == "pairwise":
            pid = str(row["pair_uid"]) if row.get("pair_uid") is not None else default_id
            return [build(Example, file, line, id=pid, item_id=pid, rule="strict",
                          chosen=_answer(row["chosen"], file, line, "chosen"),
                          rejected=_answer(row["reject"], file, line, "reject"), **common)]
        losers = row.get("loser_list")
        if not isinstance(losers, list) or not losers:
            raise DataError(file, line, "loser_list", "must be a non-empty list of answers")
        best = _answer(row["bon_best"], file, line, "bon_best")
        item = str(row["bon_uid"]) if row.get("bon_uid") is not None else default_id
        return [build(Example, file, line, id=f"{item}#c0-r{j}", item_id=item, variant=f"c0-r{j}", rule="beats-all",
                      chosen=best, rejected=_answer(loser, file, line, f"loser_list[{j}]"), **common)
                for j, loser in enumerate(losers)]

    @classmethod
    def score(cls, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Items counted correct / items, overall and per category_path (module docstring)."""
        bon = any(r.get("rule") == "beats-all" for r in records)
        return item_score("RMB best-of-N accuracy" if bon else "RMB pairwise accuracy", UPSTREAM, records,
                          "items whose best answer beats every loser / items" if bon else
                          "pairs with chosen scored strictly higher / pairs")
