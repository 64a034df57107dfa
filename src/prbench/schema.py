"""Typed records of the Personalized RewardBench format and its LaMP-QA source form.

Field names follow the released dataset: `id`, `question`, `profile`, `rubric_aspects`,
`narrative`, `category`, `chosen`, `rejected`. `narrative` and `rubric_aspects` are the
answer key: only `prbench.conditions` may put them in front of a reward model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

# The three LaMP-QA categories of the paper; aliases map human spellings to config names.
CATEGORIES = (
    "Art_and_Entertainment",
    "Lifestyle_and_Personal_Development",
    "Society_and_Culture",
)
CATEGORY_ALIASES = {
    "arts": "Art_and_Entertainment",
    "arts & entertainment": "Art_and_Entertainment",
    "art_and_entertainment": "Art_and_Entertainment",
    "lifestyle": "Lifestyle_and_Personal_Development",
    "lifestyle & personal development": "Lifestyle_and_Personal_Development",
    "lifestyle_and_personal_development": "Lifestyle_and_Personal_Development",
    "society": "Society_and_Culture",
    "society & culture": "Society_and_Culture",
    "society_and_culture": "Society_and_Culture",
}
CATEGORY_SHORT = {
    "Art_and_Entertainment": "Arts",
    "Lifestyle_and_Personal_Development": "Lifestyle",
    "Society_and_Culture": "Society",
}


def normalize_category(name: str) -> str:
    """Map an alias ('arts', 'Arts & Entertainment') to the config name; unknown stays as given."""
    return CATEGORY_ALIASES.get(name.strip().lower(), name.strip())


def _nonblank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class _Record(BaseModel):
    # Unknown fields are kept (datasets grow columns), never fatal; ints/floats are not text.
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


def _id_text(value: object) -> object:
    # Integer ids are common in exported data; they are ids, not numbers.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ProfilePost(_Record):
    """One past post of the user: the raw material of personalization."""

    id: str
    _id = field_validator("id", mode="before")(_id_text)
    category: str = ""
    text: str

    _text = field_validator("text")(_nonblank)


class RubricAspect(_Record):
    """One thing this user expects in an answer, with why, and the narrative span it came from."""

    aspect: str
    reason: str = ""
    evidence: str = ""

    _aspect = field_validator("aspect")(_nonblank)


class SourceItem(_Record):
    """A LaMP-QA-style item: question, the asking user's profile, narrative and rubric."""

    id: str
    question: str
    profile: list[ProfilePost]
    rubric_aspects: list[RubricAspect]
    narrative: str = ""
    category: str
    user_id: str | None = None
    gold_answer: str | None = None

    _id = field_validator("id", mode="before")(_id_text)
    _nonblank_fields = field_validator("id", "question", "category")(_nonblank)


class Example(SourceItem):
    """A benchmark pair: `chosen` fits this user's rubric, `rejected` avoids it."""

    chosen: str
    rejected: str

    _responses = field_validator("chosen", "rejected")(_nonblank)
