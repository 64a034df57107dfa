"""Small, valid benchmark records for tests and examples (no files, no models)."""

from __future__ import annotations

from typing import Any

from prbench.schema import CATEGORIES


def make_record(i: int, user: int | None = None, **override: Any) -> dict[str, Any]:
    """A valid benchmark record; users get distinct, consistent interests (hiking vs baking ...)."""
    u = i % 4 if user is None else user
    topic = ["hiking", "baking", "chess", "poetry"][u]
    rec = {
        "id": f"ex-{i:03d}",
        "user_id": f"user-{u}",
        "category": CATEGORIES[i % 3],
        "question": f"How should I plan my weekend around {topic}? (item {i})",
        "profile": [
            {"id": f"u{u}-p{j}", "category": topic if j % 2 == 0 else "misc",
             "text": f"Post {j}: I love {topic}, especially on quiet mornings." if j % 2 == 0
             else f"Post {j}: an unrelated note about my commute number {j}."}
            for j in range(6)
        ],
        "narrative": f"I care about {topic} and I want a plan that is cheap and relaxed.",
        "rubric_aspects": [
            {"aspect": f"Centres on {topic}", "reason": f"The user loves {topic}.", "evidence": f"I care about {topic}"},
            {"aspect": "Low cost", "reason": "Budget matters.", "evidence": "cheap and relaxed"},
        ],
        "chosen": f"Spend Saturday morning on {topic}, keep it cheap and relaxed, and rest on Sunday.",
        "rejected": "Book a guided city tour on Saturday and a fancy brunch on Sunday with friends.",
    }
    rec.update(override)
    return rec


def make_records(n: int = 12) -> list[dict[str, Any]]:
    return [make_record(i) for i in range(n)]
