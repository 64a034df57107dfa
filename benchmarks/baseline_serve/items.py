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

from prbench.cache import content_key
from prbench.schema import ProfilePost, RubricAspect, SourceItem

CONTEXT_KEYS = ("id", "question", "profile", "rubric_aspects")


def item_context(item: SourceItem, condition: str, *, with_text: bool = True) -> dict[str, Any]:
    """The dict a training row carries for `item` (id always; text fields unless `with_text` is off)."""
    ctx: dict[str, Any] = {"id": item.id}
    if with_text:
        ctx["question"] = item.question
        ctx["profile"] = [{"id": p.id, "category": p.category, "text": p.text} for p in item.profile]
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
        except ValueError as exc:
            raise ValueError(f"label is not JSON ({exc.msg} at char {exc.pos})") from None
        if isinstance(value, dict):
            return value
    raise ValueError(f"label must be a JSON object with 'id' (and 'question', 'profile'), got {type(label).__name__}")


def item_from_context(ctx: Mapping[str, Any], items: Mapping[str, SourceItem] | None = None) -> SourceItem:
    """The item a row's context describes: looked up by id when `items` has it, else built from the text.

    Raises ValueError naming the missing or malformed field (the caller counts it as invalid).
    """
    raw_id = ctx.get("id")
    item_id = str(raw_id) if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
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
            profile=[ProfilePost(id=str(p["id"]), category=p.get("category") or "", text=p["text"]) for p in profile],
            rubric_aspects=[RubricAspect(aspect=a["aspect"], reason=a.get("reason") or "") for a in aspects],
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed profile post or rubric aspect ({exc!r})") from None
