"""`hh-rlhf`: Anthropic's Helpful and Harmless pairs, full transcripts split at the last assistant turn.

Source: github.com/anthropics/hh-rlhf (`harmless-base/test.jsonl.gz` and siblings), one JSON
object per line with `chosen` and `rejected`, each the whole dialogue in the
"\\n\\nHuman: ...\\n\\nAssistant: ..." form. Both share every turn but the last assistant one.
Read: `chosen`, `rejected` (optional `id`). The shared turns become `context` (dialogue before
the last user turn) and `question` (the last user turn); the last assistant turns are the
judged responses. A pair whose transcripts differ before the last assistant turn is an error
naming its line: it would not be a pair of answers to one conversation; so is an empty last
assistant turn. The real harmless-base test split has 9 such rows of 2,312: `hh-rlhf:skip`
leaves them out, counts them and warns (first row named).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import (
    Reader,
    Skips,
    build,
    parse_transcript,
    row_id,
    rows,
    split_at_last_assistant,
    stem,
    text,
)
from prbench.schema import Example


def _is_transcript(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip("\n").startswith(("Human:", "## Human:"))


class HHRLHF(Reader):
    name = "hh-rlhf"
    source = "github.com/anthropics/hh-rlhf (jsonl.gz per split); MIT"
    fields = "chosen (full transcript), rejected (full transcript), id (optional)"
    priority = 30
    shapes = (("chosen", "rejected"),)
    syntax = "hh-rlhf[:skip]"

    def __init__(self, rest: str = "", **options: Any):
        super().__init__(rest, **options)
        if rest not in ("", "skip"):
            raise SpecError(f"hh-rlhf: unknown option {rest!r} (use hh-rlhf or hh-rlhf:skip)")

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "prompt" not in row and _is_transcript(row.get("chosen")) and _is_transcript(row.get("rejected"))

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        skips = Skips(self.rest == "skip")
        for file, line, row in rows(src, split):
            rec = skips.keep(self.record, row, file, line, row_id(src, file, line))
            if rec is not None:
                yield file, line, rec
        skips.report(self.name, src)

    @staticmethod
    def record(row: Mapping[str, Any], file: str, line: int, default_id: str | None = None) -> Example:
        chosen = parse_transcript(text(row, "chosen", file, line), file, line, "chosen")
        rejected = parse_transcript(text(row, "rejected", file, line), file, line, "rejected")
        return pair_from_transcripts(chosen, rejected, file, line, row.get("id"), default_id or f"{stem(file)}:{line}",
                                     "hh-rlhf")


def pair_from_transcripts(chosen: list, rejected: list, file: str, line: int, given_id: Any, default_id: str,
                          category: str, **extra: Any) -> Example:
    """An Example from two transcripts that share everything but the final assistant turn."""
    c_ctx, c_q, c_resp = split_at_last_assistant(chosen, file, line, "chosen")
    r_ctx, r_q, r_resp = split_at_last_assistant(rejected, file, line, "rejected")
    if (c_ctx, c_q) != (r_ctx, r_q):
        raise DataError(file, line, "rejected", "the two transcripts differ before the last assistant turn "
                                                "(not two answers to one conversation)")
    return build(Example, file, line, id=str(given_id) if given_id is not None else default_id, question=c_q,
                 context=c_ctx, chosen=c_resp, rejected=r_resp, profile=[], rubric_aspects=[], category=category,
                 **extra)
