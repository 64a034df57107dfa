"""`prism`: the raw PRISM alignment tables turned into per-user pairs with the dialogue so far.

Source: github.com/HannahKirk/prism-alignment (`data/prism_datacard.md`,
`src/data_processing/prepare_conversations.py`). Give a folder (or files) holding
`survey.jsonl` and `conversations.jsonl`. Read:
- conversations: `conversation_id`, `user_id`, `conversation_type`, `generated_datetime`
  (optional), `conversation_history` items with `turn`, `role` (user / model), `content`,
  `within_turn_id`, `if_chosen`, `score` (kept as the pair's scores);
- survey: `user_id`, `self_description`, `system_string`, `stated_prefs` (a mapping, or
  flat `stated_prefs:NAME` columns) -> `persona`.
Pairs: at every turn, the chosen model reply vs each other reply of that turn (as
SynthesizeMe's `parse_conversation_row`); `context` is the dialogue so far (earlier user
turns and the replies chosen there), `question` the turn's user message. `time` is the
conversation's `generated_datetime` and turn, so `history` holds only earlier pairs.

Splits (`--format prism[:MODE[:SHARE[:SEED]]]`, `--split test|train`):
- `within` (default): per user, the last SHARE (0.25) of their conversations by time (then
  id) are test, the rest train; `history` = that user's train pairs earlier than the pair.
- `user`: a seeded SHARE of users are test (user-disjoint); their history is empty by
  construction (use `persona`).
`profile` holds the same earlier pairs as past choices (the reply the user rated highest over
each other reply of a turn: PRISM's ratings as judgments), so the `profile` condition shows
"chose ... over ..." and `wrong-profile` another user's choices.
Licence: human-written text CC BY 4.0, model responses CC BY-NC 4.0 (the data card).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import Reader, build, rows, text, with_past_choices
from prbench.schema import Example, HistoryPair, Message

MODES = ("within", "user")


def _persona(row: Mapping[str, Any]) -> str:
    parts = []
    if isinstance(row.get("self_description"), str) and row["self_description"].strip():
        parts.append(f"About me: {row['self_description'].strip()}")
    if isinstance(row.get("system_string"), str) and row["system_string"].strip():
        parts.append(f"How I want an AI to behave: {row['system_string'].strip()}")
    prefs = row.get("stated_prefs")
    if not isinstance(prefs, dict):
        prefs = {k.split(":", 1)[1]: v for k, v in row.items() if k.startswith("stated_prefs:")}
    rated = sorted(((k, v) for k, v in prefs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)),
                   key=lambda kv: (-kv[1], kv[0]))
    if rated:
        parts.append("How much each matters to me (0-100): " + ", ".join(f"{k} {v:g}" for k, v in rated))
    return "\n".join(parts)


class Prism(Reader):
    name = "prism"
    source = "github.com/HannahKirk/prism-alignment (data card, prepare_conversations.py)"
    fields = "survey: user_id, self_description, system_string, stated_prefs; conversations: conversation_id, " \
             "user_id, conversation_type, generated_datetime, conversation_history[{turn, role, content, " \
             "within_turn_id, if_chosen, score}]"
    priority = 14
    shapes = (("conversation_id", "user_id", "conversation_history"), ("user_id", "self_description"))
    syntax = "prism[:MODE[:SHARE[:SEED]]]"

    def __init__(self, rest: str = "", **options: Any):
        super().__init__(rest, **options)
        parts = rest.split(":") if rest else []
        if len(parts) > 3 or any(not p for p in parts):
            raise SpecError(f"prism: expected {self.syntax}, got prism:{rest}")
        self.mode = parts[0] if parts else "within"
        if self.mode not in MODES:
            raise SpecError(f"prism: unknown split mode {self.mode!r} (use {', '.join(MODES)})")
        try:
            self.share = float(parts[1]) if len(parts) > 1 else 0.25
            self.seed = int(parts[2]) if len(parts) > 2 else 0
        except ValueError:
            raise SpecError(f"prism: expected prism:MODE:SHARE:SEED, got prism:{rest}") from None
        if not 0.0 < self.share < 1.0:
            raise SpecError(f"prism: the test share must be between 0 and 1, got {self.share}")

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return isinstance(row.get("conversation_history"), list) or (
            "user_id" in row and ("self_description" in row or "system_string" in row))

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        if split not in ("train", "test"):
            raise DataError(str(src), None, "split", f"prism splits are train and test, got {split!r}")
        personas: dict[str, str] = {}
        convs = []
        for file, line, row in rows(src, split):
            if "conversation_history" in row:
                convs.append((file, line, row))
            elif "user_id" in row:
                personas[str(row["user_id"])] = _persona(row)
            else:
                raise DataError(file, line, None, "neither a conversation (conversation_history) nor a survey row")
        if not convs:
            raise DataError(str(src), None, "conversation_history", "no conversations found (give conversations.jsonl)")
        pairs = [p for file, line, row in convs for p in self._pairs(file, line, row)]
        test = self._test_conversations(convs)
        if split == "test" and not test:
            raise DataError(str(src), None, "split", f"prism:{self.mode}:{self.share:g}: the test share puts no "
                                                     "conversation in the test split (a user needs at least 2 "
                                                     "conversations; give a larger share)")
        history: dict[str, list[HistoryPair]] = defaultdict(list)
        for file, line, conv, ex in pairs:
            if conv not in test:
                history[ex["user_id"]].append(HistoryPair(id=ex["id"], prompt=ex["question"], chosen=ex["chosen"],
                                                          rejected=ex["rejected"], time=ex["time"]))
        for file, line, conv, ex in pairs:
            if (conv in test) != (split == "test"):
                continue
            rec = build(Example, file, line, **ex, persona=personas.get(ex["user_id"], ""),
                        history=history[ex["user_id"]], profile=[], rubric_aspects=[])
            yield file, line, with_past_choices(rec, history[ex["user_id"]])

    def _test_conversations(self, convs: list[tuple[str, int, Mapping[str, Any]]]) -> set[str]:
        by_user: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for _, _, row in convs:
            by_user[str(row.get("user_id"))].append((str(row.get("generated_datetime") or ""),
                                                     str(row.get("conversation_id"))))
        test: set[str] = set()
        if self.mode == "user":
            users = sorted(by_user)
            random.Random(f"{self.seed}:prism-users").shuffle(users)
            for u in users[: max(1, round(self.share * len(users)))]:
                test.update(cid for _, cid in by_user[u])
            return test
        for items in by_user.values():
            items.sort()
            n_test = math.floor(self.share * len(items) + 0.5) if len(items) > 1 else 0
            test.update(cid for _, cid in items[len(items) - n_test:] if n_test)
        return test

    @staticmethod
    def _pairs(file: str, line: int, row: Mapping[str, Any]) -> Iterator[tuple[str, int, str, dict[str, Any]]]:
        cid = text(row, "conversation_id", file, line) if not isinstance(row.get("conversation_id"), int) \
            else str(row["conversation_id"])
        uid = row.get("user_id")
        if not isinstance(uid, (str, int)) or isinstance(uid, bool) or not str(uid).strip():
            raise DataError(file, line, "user_id", "must be a non-empty id")
        when = str(row.get("generated_datetime") or "")
        by_turn: dict[int, dict[str, Any]] = defaultdict(lambda: {"user": None, "models": []})
        for i, item in enumerate(row["conversation_history"]):
            where = f"conversation_history[{i}]"
            if not isinstance(item, dict):
                raise DataError(file, line, where, "must be an object")
            turn = item.get("turn")
            if not isinstance(turn, int) or isinstance(turn, bool):
                raise DataError(file, line, f"{where}.turn", "must be an integer")
            content = item.get("content")
            if not isinstance(content, str) or not content.strip():
                raise DataError(file, line, f"{where}.content", "must be non-empty text")
            if item.get("role") == "user":
                by_turn[turn]["user"] = content
            elif item.get("role") == "model":
                if not isinstance(item.get("if_chosen"), bool):
                    raise DataError(file, line, f"{where}.if_chosen", "must be true or false")
                by_turn[turn]["models"].append((item.get("within_turn_id", len(by_turn[turn]["models"])),
                                                item["if_chosen"], content, item.get("score")))
            else:
                raise DataError(file, line, f"{where}.role", f"unknown role {item.get('role')!r} (use user or model)")
        dialogue: list[Message] = []
        for turn in sorted(by_turn):
            t = by_turn[turn]
            if t["user"] is None:
                raise DataError(file, line, "conversation_history", f"turn {turn} has model replies but no user message")
            chosen = [m for m in t["models"] if m[1]]
            if len(chosen) != 1:
                raise DataError(file, line, "conversation_history",
                                f"turn {turn} has {len(chosen)} chosen replies (if_chosen), expected 1")
            wid, _, chosen_text, chosen_score = chosen[0]
            for rid, _, rejected_text, rejected_score in (m for m in t["models"] if not m[1]):
                scores = {"scores": [chosen_score, rejected_score]} if chosen_score is not None else {}
                yield file, line, cid, {
                    "id": f"{cid}:t{turn}:{wid}>{rid}", "question": t["user"], "context": list(dialogue),
                    "chosen": chosen_text, "rejected": rejected_text, "user_id": str(uid),
                    "category": str(row.get("conversation_type") or "prism"),
                    "time": f"{when}#{turn:04d}" if when else None, **scores}  # untimed: never "earlier"
            dialogue += [Message(role="user", content=t["user"]), Message(role="assistant", content=chosen_text)]
