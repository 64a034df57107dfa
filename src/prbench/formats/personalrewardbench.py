"""`personalrewardbench`: SynthesizeMe's per-user pairs (the PersonalRewardBench sets).

Source: github.com/SALT-NLP/SynthesizeMe (`synthesizeme/datasets/dataset.py`,
`utils/convert.py`, README "Input Data Format"), the hub sets
`chatbot_arena_personalized_*` and `prism_personalized_*`. Read: `user_id`, `split`
(train / val / test), `context` (list of {role, content}, ending with the user turn),
`chosen` / `rejected` ({role, content}, one turn each), `flip` (kept as `flip`: the order
SynthesizeMe shows the pair in; prbench draws its own seeded order), optional `id`,
`conversation_id`, `dataset`.

`--split` picks the rows evaluated (default test). Each such pair's `history` is every
`train` row of the same user (prompt = its last user turn): the data gives no timestamps,
so "earlier" means "in the training part", as SynthesizeMe's own split. The same pairs are its
`profile`, as past choices (SynthesizeMe's user context): the `profile` condition shows them as
"chose ... over ...", `wrong-profile` another user's; never the judged pair itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError
from prbench.formats.base import (
    Reader,
    build,
    message,
    messages,
    row_id,
    rows,
    split_last_user,
    text,
    with_past_choices,
)
from prbench.schema import Example, HistoryPair

SPLITS = ("train", "val", "test")


class PersonalRewardBench(Reader):
    name = "personalrewardbench"
    source = "github.com/SALT-NLP/SynthesizeMe (datasets/dataset.py, utils/convert.py)"
    fields = "user_id, split, context[{role, content}], chosen{role, content}, rejected{role, content}, flip, id, " \
             "conversation_id, dataset"
    priority = 15
    shapes = (("user_id", "split", "context", "chosen", "rejected"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "user_id" in row and isinstance(row.get("context"), list) and isinstance(row.get("chosen"), dict)

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        parsed = []
        for file, line, row in rows(src, split):
            user = row.get("user_id")
            if isinstance(user, int) and not isinstance(user, bool):
                user = str(user)
            if not isinstance(user, str) or not user.strip():
                raise DataError(file, line, "user_id", "must be a non-empty id")
            part = text(row, "split", file, line)
            if part not in SPLITS:
                raise DataError(file, line, "split", f"unknown split {part!r} (use {', '.join(SPLITS)})")
            context, question = split_last_user(messages(row.get("context"), file, line, "context"), file, line,
                                                "context")
            chosen = message(row.get("chosen"), file, line, "chosen").content
            rejected = message(row.get("rejected"), file, line, "rejected").content
            rid = row.get("id")
            rid = str(rid) if rid is not None else row_id(src, file, line)
            parsed.append((file, line, row, user, part, context, question, chosen, rejected, rid))
        if split not in SPLITS:
            raise DataError(str(src), None, "split", f"unknown split {split!r} (use {', '.join(SPLITS)})")
        history: dict[str, list[HistoryPair]] = defaultdict(list)
        for file, line, row, user, part, context, question, chosen, rejected, rid in parsed:
            if part == "train":
                history[user].append(HistoryPair(id=rid, prompt=question, chosen=chosen, rejected=rejected))
        kept = [p for p in parsed if p[4] == split]
        if parsed and not kept:
            present = sorted({p[4] for p in parsed})
            raise DataError(str(src), None, "split", f"no rows in split {split!r} (the data has: {', '.join(present)})")
        for file, line, row, user, part, context, question, chosen, rejected, rid in kept:
            extra = {"flip": row["flip"]} if isinstance(row.get("flip"), bool) else {}
            ex = build(Example, file, line, id=rid, question=question, context=context, chosen=chosen,
                       rejected=rejected, user_id=user, category=str(row.get("dataset") or "personalrewardbench"),
                       history=history[user], profile=[], rubric_aspects=[], **extra)
            yield file, line, with_past_choices(ex, history[user])
