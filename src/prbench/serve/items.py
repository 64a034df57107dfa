"""The user context an RL training row carries, and how it becomes a `SourceItem` again.

A row names its item by `id` and, unless the reward side has the benchmark file to look the id
up in, carries `question` and `profile` too (plus `rubric_aspects` for the oracle condition
only: the rubric is the answer key, never given to a reward that does not need it). The
narrative is never carried. The same dict is OpenRLHF's JSON `label` and verl's `extra_info`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from prbench.schema import RubricAspect, SourceItem, posts_from_wire, posts_to_wire
from prbench.store.cache import content_key

CONTEXT_KEYS = ("id", "question", "profile", "rubric_aspects")


def item_context(item: SourceItem, condition: str, *, with_text: bool = True) -> dict[str, Any]:
    """The dict a training row carries for `item` (id always; text fields unless `with_text` is off)."""
    ctx: dict[str, Any] = {"id": item.id}
    if with_text:
        ctx["question"] = item.question
        ctx["profile"] = posts_to_wire(item.profile)
        if condition == "oracle":
            ctx["rubric_aspects"] = [{"aspect": a.aspect, "reason": a.reason} for a in item.rubric_aspects]
    return ctx


def parse_label(label: Any) -> dict[str, Any]:
    """A label as OpenRLHF passes it (a JSON string, or already a dict) -> dict; ValueError otherwise."""
    if isinstance(label, Mapping):
        return dict(label)
    if isinstance(label, str):
        try:
            value = json.loads(label)
        except json.JSONDecodeError as exc:
            raise ValueError(f"label is not JSON ({exc.msg} at char {exc.pos})") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, "[" * 50000 (issue 42.11)
            raise ValueError(f"label is not usable JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
        if isinstance(value, dict):
            return value
    raise ValueError(f"label must be a JSON object with 'id' (and 'question', 'profile'), got {type(label).__name__}")


def item_from_context(ctx: Mapping[str, Any], items: Mapping[str, SourceItem] | None = None) -> SourceItem:
    """The item a row's context describes: looked up by id when `items` has it, else built from the text.

    Raises ValueError naming the missing or malformed field (the caller counts it as invalid).
    """
    raw_id = ctx.get("id")
    item_id = str(raw_id) if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None  # str(): a
    # number too long to print raises ValueError, which the caller counts as a bad label
    if items is not None and item_id is not None and item_id in items and "question" not in ctx:
        return items[item_id]
    question = ctx.get("question")
    if not isinstance(question, str) or not question.strip():
        where = f"id {item_id!r} is not in the served items" if item_id is not None and items is not None else (
            "no 'question'" if item_id is not None else "no 'id' and no 'question'")
        raise ValueError(f"cannot tell which item this is: {where}")
    profile = ctx.get("profile") or []
    aspects = ctx.get("rubric_aspects") or []
    if not isinstance(profile, list) or not isinstance(aspects, list):
        raise ValueError("'profile' and 'rubric_aspects' must be lists")  # noqa: TRY004 - counted as invalid
    try:
        return SourceItem(
            id=item_id or content_key("rl-row", question)[:16], question=question, category="rl",
            profile=posts_from_wire(profile),
            rubric_aspects=[RubricAspect(aspect=a["aspect"], reason=a.get("reason") or "") for a in aspects],
        )
    except ValidationError as exc:  # one line: the first problem and where
        first = exc.errors()[0]
        raise ValueError(f"malformed profile post or rubric aspect ({'.'.join(map(str, first['loc']))}: "
                         f"{first['msg']})") from None
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"malformed profile post or rubric aspect ({exc!r})") from None


def read_rows(path: str) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(prompt messages, user context) of each training row: `prbench export verl` (parquet: `prompt`,
    `extra_info`) or `prbench export openrlhf` (JSONL: `prompt`, `label`). ValueError names the row."""
    from pathlib import Path

    from prbench.raw import _iter_jsonl, _iter_parquet
    from prbench.store.runs import regular_file

    p = Path(path)
    # the data readers' bounds: a regular file (a FIFO would block), lines of bounded length, rows streamed
    if not regular_file(p, "give the file `prbench export verl` or `openrlhf` wrote"):
        raise FileNotFoundError(f"no such file {path}")
    out = []
    for n, row in (_iter_parquet if p.suffix == ".parquet" else _iter_jsonl)(p):
        where = f"{path}: row {n}"
        messages = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError(f"{where}: 'prompt' must be a list of chat messages")
        ctx = row.get("extra_info") if "extra_info" in row else parse_label(row.get("label"))
        if not isinstance(ctx, dict):
            raise ValueError(f"{where}: no user context ('extra_info' or 'label')")  # noqa: TRY004 - one error kind
        ctx = {k: ctx[k] for k in CONTEXT_KEYS if k in ctx}  # verl adds index, num_turns, ...
        out.append((messages, ctx))
    return out
