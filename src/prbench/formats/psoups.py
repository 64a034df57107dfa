"""`psoups`: Personalized Soups (RLPHF) preference pairs along one preference dimension.

Source: github.com/joeljang/RLPHF (`training_reward_model.py` reads `user_input`,
`completion_a` (preferred), `completion_b`; files `data/psoups/alpaca_gpt4_P1A_10k.json` ...,
one per dimension; the dimensions are the annotation criteria of `gpt4_annotate/GPT4_b5/pref*.txt`).
Read: `user_input`, `completion_a`, `completion_b`, optional `preference` (1: a preferred,
2: b preferred, as `gpt4_annotate/run.py` counts), and the dimension from `dimension` (or
`preference_dimension`) else the file name (`..._P1A_...`). The user is the dimension; its
persona is the dimension's criterion (prbench's wording of the annotation criterion). Its
profile is that stated preference ("wrote") and up to 8 other pairs of the same dimension in
the same source, as past choices drawn by the pair's id (never the judged pair): the
dimension's judgments, shown as such.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.context.judgments import choices_as_posts
from prbench.errors import DataError
from prbench.formats.base import Reader, build, row_id, rows, text
from prbench.schema import Example, HistoryPair, ProfilePost

PAST_CHOICES = 8  # other pairs of a dimension shown as one "user's" past choices (the retriever keeps top-k)

DIMENSIONS = {
    "P1A": "I want answers an elementary school student could easily understand.",
    "P1B": "I want answers only a PhD student in the field could understand.",
    "P2A": "I want concise answers that get to the point without being verbose.",
    "P2B": "I want very informative answers that leave out no background information.",
    "P3A": "I want friendly, witty, funny and humorous answers, like from a close friend.",
    "P3B": "I want answers given in an unfriendly manner.",
    "P3C": "I want answers given in a sassy manner.",
    "P3D": "I want answers given in a sarcastic manner.",
}
_IN_NAME = re.compile(r"(?<![A-Za-z0-9])(P[1-3][A-D])(?![A-Za-z0-9])")


class PSoups(Reader):
    name = "psoups"
    source = "github.com/joeljang/RLPHF (training_reward_model.py, data/psoups/*_P1A_*.json)"
    fields = "user_input, completion_a, completion_b, preference (1|2, optional), dimension (or from file name)"
    priority = 24
    shapes = (("user_input", "completion_a", "completion_b"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "user_input" in row and "completion_a" in row and "completion_b" in row

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        parsed: list[tuple[str, int, Example]] = []
        for file, line, row in rows(src, split):
            dim = row.get("dimension") or row.get("preference_dimension")
            if dim is None:
                found = _IN_NAME.search(Path(file).name)
                dim = found.group(1) if found else None
            if dim not in DIMENSIONS:
                raise DataError(file, line, "dimension", f"unknown preference dimension {dim!r} (use "
                                f"{', '.join(DIMENSIONS)}, in a 'dimension' field or the file name)")
            a, b = text(row, "completion_a", file, line), text(row, "completion_b", file, line)
            pref = row.get("preference", 1)
            if pref not in (1, 2) or isinstance(pref, bool):
                raise DataError(file, line, "preference", f"must be 1 (completion_a) or 2 (completion_b), got {pref!r}")
            chosen, rejected = (a, b) if pref == 1 else (b, a)
            rid = row.get("id")
            parsed.append((file, line, build(
                Example, file, line, id=str(rid) if rid is not None else row_id(src, file, line),
                question=text(row, "user_input", file, line), chosen=chosen, rejected=rejected, category=dim,
                user_id=dim, persona=DIMENSIONS[dim], profile=[], rubric_aspects=[])))
        by_dim: dict[str, list[HistoryPair]] = defaultdict(list)
        for _, _, ex in parsed:
            by_dim[ex.category].append(HistoryPair(id=ex.id, prompt=ex.question, chosen=ex.chosen,
                                                   rejected=ex.rejected))
        for file, line, ex in parsed:
            yield file, line, ex.model_copy(update={"profile": _profile(ex, by_dim[ex.category])})


def _profile(ex: Example, same_dim: list[HistoryPair]) -> list[ProfilePost]:
    """The stated preference (in the user's words), then up to PAST_CHOICES other pairs of the same
    dimension as past choices, drawn by the example's id: never the judged pair."""
    pool = random.Random(f"psoups:{ex.id}").sample(same_dim, min(PAST_CHOICES + 1, len(same_dim)))  # O(k) a pair
    drawn = [h for h in pool if h.id != ex.id][:PAST_CHOICES]
    stated = ProfilePost(id=f"{ex.category}:stated", text=DIMENSIONS[ex.category], stance="wrote")
    return [stated, *choices_as_posts(drawn)]
