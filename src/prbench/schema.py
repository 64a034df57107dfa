"""Typed records of the Personalized RewardBench format and its LaMP-QA source form.

Field names follow the released dataset: `id`, `question`, `profile`, `rubric_aspects`,
`narrative`, `category`, `chosen`, `rejected`. `narrative` and `rubric_aspects` are the
answer key: only `prbench.context.conditions` may put them in front of a reward model. Both are
optional, and `category` is any text (`uncategorized` when absent): a personalized file of
one's own needs only `id, question, profile, chosen, rejected` (and `user_id` to name the
person). A profile item is a post (`{id, text}` or a plain string), a stance on a text
(`{text, stance}`) or a past choice (`{prompt, chosen, rejected}`); see `ProfilePost`.

Other formats (`prbench.formats`) read into the same records through optional fields that
today's files never set, so those load unchanged:
- `context`: the dialogue before the judged turn (a list of messages; `question` is the last
  user message), rendered by the RM's chat template, never flattened for a classifier RM.
- `history`: the user's earlier preference pairs; `persona`: stated preferences or a
  self-description; `time`: when the judged pair happened (sortable text), so history never
  shows a later pair. Only `prbench.context.conditions` reads them for an RM.
- `item_id` / `rule` / `variant`: one pair of an item with several chosen or rejected
  responses; `prbench.stats.metrics.collapse_items` scores the item by its format's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

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


def _nonblank_opt(value: str | None) -> str | None:
    return None if value is None else _nonblank(value)


def same_texts(chosen: str, rejected: str) -> bool:
    """A pair of one text (up to surrounding space): nothing to prefer, and every RM ties on it at 0.5, a number
    that looks like a measurement. prbench's own files refuse it where they are read (`raw.parse_record`); other
    formats keep such rows as upstream scores them (RM-Bench has some)."""
    return chosen.strip() == rejected.strip()


# Stance words (`prbench.context.judgments`) and their sign: +1 the user stands behind the text, -1 they reject it, 0 no verdict.
STANCE_SIGNS: dict[str, float] = {
    "agree": 1.0, "agreed": 1.0, "like": 1.0, "liked": 1.0, "upvote": 1.0, "chose": 1.0, "chosen": 1.0,
    "wrote": 1.0, "endorse": 1.0,
    "disagree": -1.0, "disagreed": -1.0, "dislike": -1.0, "disliked": -1.0, "downvote": -1.0,
    "rejected": -1.0, "reject": -1.0,
    "pass": 0.0, "neutral": 0.0, "unsure": 0.0,
}


class _Record(BaseModel):
    # Unknown fields are kept (datasets grow columns), never fatal; `prbench data validate` names them, and a
    # near-miss of a field left unset (`userid`) is refused where prbench's own files are read (`raw.near_miss`).
    # Ints/floats are not text.
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


def _id_text(value: object) -> object:
    # Integer ids are common in exported data; they are ids, not numbers.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


NO_CATEGORY = "uncategorized"  # the group of records that name no category


class ProfilePost(_Record):
    """One past post of the user: the raw material of personalization.

    `stance` marks a judgment rather than a post: the user's verdict on `text` (agree, disagree,
    wrote, ...; see `prbench.context.judgments`). Without it a post is something the user wrote.
    A past choice keeps what was asked (`prompt`) and what was passed over (`rejected`), with
    `text` the chosen answer and `stance` "chose"; in a file it is written `{prompt, chosen,
    rejected}` (see `profile_items`).
    """

    id: str
    _id = field_validator("id", mode="before")(_id_text)
    category: str = ""
    text: str
    stance: str | None = None
    prompt: str | None = None
    rejected: str | None = None

    _text = field_validator("text")(_nonblank)
    _choice = field_validator("prompt", "rejected")(_nonblank_opt)

    @field_validator("stance")
    @classmethod
    def _stance(cls, value: str | None) -> str | None:
        # Why refuse unknown words: a typo ("disagre") would read as "no verdict" to every method.
        if value is not None and value.strip().lower() not in STANCE_SIGNS:
            raise ValueError(f"unknown stance {value!r} (use {', '.join(STANCE_SIGNS)})")
        return value

    @model_validator(mode="after")
    def _choice_is_chosen(self) -> ProfilePost:
        if self.rejected is not None and (self.stance or "").strip().lower() not in ("chose", "chosen"):
            raise ValueError(f"a past choice (with rejected) has stance 'chose', got {self.stance!r}")
        return self

    @property
    def search_text(self) -> str:
        """What a retriever ranks: the text, after what was asked when the item answers a prompt."""
        return f"{self.prompt}\n{self.text}" if self.prompt else self.text

    @property
    def is_choice(self) -> bool:
        """A past choice: `text` was chosen over `rejected` (in answer to `prompt`, when known)."""
        return self.rejected is not None


def posts_to_wire(posts: Sequence[ProfilePost]) -> list[dict[str, Any]]:
    """A profile as a training row or a reward request carries it: every judgment field kept, since a
    stance dropped on the way would reach the RM as a post the person wrote."""
    return [p.model_dump(exclude_none=True) for p in posts]


def posts_from_wire(value: object) -> list[ProfilePost]:
    """`posts_to_wire` read back (also strings and past choices, as in a file); a missing or null
    category is ''. Malformed items raise ValueError (pydantic's) or TypeError."""
    if not isinstance(value, list):
        raise TypeError(f"a profile is a list, got {type(value).__name__}")
    items = cast("list[object]", profile_items(value))
    return _POSTS.validate_python([{**p, "category": p.get("category") or ""} if isinstance(p, dict) else p
                                   for p in items])  # a list: an error's location starts with the item's place


_POSTS: TypeAdapter[list[ProfilePost]] = TypeAdapter(list[ProfilePost])


def profile_items(value: object) -> object:
    """A profile as a list of `ProfilePost` fields: plain strings become posts, a past choice
    `{prompt, chosen, rejected}` becomes a "chose" post, and an item without an id gets its place
    (`p0`, `p1`, ...). Anything else is left for validation to refuse with its location."""
    if not isinstance(value, list):
        return value
    out: list[object] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {"text": item}
        if isinstance(item, dict):
            if ("chosen" in item) != ("rejected" in item) and "text" not in item:
                raise ValueError(f"item {i}: a past choice needs both chosen and rejected")
            if "chosen" in item and "text" not in item:
                item = {k: v for k, v in item.items() if k != "chosen"} | {"text": item["chosen"]}
            if "rejected" in item and "stance" not in item:
                item = {**item, "stance": "chose"}
            if "id" not in item:
                item = {"id": f"p{i}", **item}
        out.append(item)
    return out


class RubricAspect(_Record):
    """One thing this user expects in an answer, with why, and the narrative span it came from."""

    aspect: str
    reason: str = ""
    evidence: str = ""

    _aspect = field_validator("aspect")(_nonblank)


def one_of(value: str, choices: tuple[str, ...], what: str) -> str:
    """`value` if it is one of `choices`, else the ValueError a pydantic validator reports in one line."""
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r} (use {', '.join(choices)})")
    return value


ROLES = ("system", "user", "assistant")


class Message(_Record):
    """One chat message of the dialogue before the judged response."""

    role: str
    content: str

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        return one_of(value, ROLES, "role")


class HistoryPair(_Record):
    """One earlier preference of the same user: what they asked, preferred and passed over."""

    id: str
    prompt: str
    chosen: str
    rejected: str
    time: str | None = None  # sortable (ISO 8601 or zero-padded): a later pair is never shown

    _id = field_validator("id", mode="before")(_id_text)
    _texts = field_validator("id", "prompt", "chosen", "rejected")(_nonblank)


class SourceItem(_Record):
    """A LaMP-QA-style item: question, the asking user's profile, narrative and rubric."""

    id: str
    question: str
    profile: list[ProfilePost]
    rubric_aspects: list[RubricAspect] = Field(default_factory=list)
    narrative: str = ""
    category: str = NO_CATEGORY
    user_id: str | None = None
    gold_answer: str | None = None
    context: list[Message] = Field(default_factory=list)
    history: list[HistoryPair] = Field(default_factory=list)
    persona: str = ""
    time: str | None = None

    _id = field_validator("id", mode="before")(_id_text)
    _nonblank_fields = field_validator("id", "question", "category")(_nonblank)
    _profile = field_validator("profile", mode="before")(profile_items)


RULES = ("pair", "best-of-n", "ties", "matrix", "strict", "beats-all")


class Example(SourceItem):
    """A benchmark pair: `chosen` fits this user's rubric, `rejected` avoids it.

    `item_id`, `rule` and `variant` are set when the pair is one of several of one item (see
    `prbench.stats.metrics.collapse_items`); `section` names a format's score section (RewardBench);
    `format` names the reader whose headline rule scores the run (`prbench.formats.format_score`).
    """

    chosen: str
    rejected: str
    item_id: str | None = None
    rule: str | None = None
    variant: str | None = None
    section: str | None = None
    format: str | None = None

    _responses = field_validator("chosen", "rejected")(_nonblank)

    @field_validator("rule")
    @classmethod
    def _rule(cls, value: str | None) -> str | None:
        if value is not None and value not in RULES:
            raise ValueError(f"unknown item rule {value!r} (use {', '.join(RULES)})")
        return value


def answer_leak(example: Example) -> str | None:
    """Where a pair's own answer sits in its profile, or None: the judged pair as a past choice, or the chosen
    text as a post. Why refuse it: the profile is shown to the RM, so the file's answer key would reach the
    scorer (`eval -c profile` read 100% on such a file); docs/formats.md says a profile never holds the pair."""
    chosen, rejected = example.chosen.strip(), example.rejected.strip()
    for i, post in enumerate(example.profile):
        if post.text.strip() != chosen:
            continue
        if post.is_choice and (post.rejected or "").strip() == rejected:
            return f"profile[{i}]: {LEAK} the judged pair itself (its chosen over its rejected)"
        return f"profile[{i}]: {LEAK} the chosen text as a post"
    return None


LEAK = "the profile holds"


def is_answer_leak(fault: Exception) -> bool:
    """Whether a located data error is `answer_leak`'s (`prbench data validate` counts them)."""
    return getattr(fault, "reason", "").startswith(LEAK)
