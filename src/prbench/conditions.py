"""What a reward model may see for one example: the ONLY reader of profile and rubric for RM input.

Conditions (the paper's, plus a control):
- `none`: question only.
- `profile`: the top-k retrieved profile posts, then the question.
- `planner`: aspects a planner predicted from the profile (read from a file keyed by id).
- `oracle`: the true rubric aspects (title and reason; never the evidence span, which is
  narrative text): the upper bound.
- `wrong-profile`: top-k posts of a different user, chosen by (seed, example id): a control
  that should score no better than `none`.
`narrative` never reaches a reward model under any condition.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prbench.cache import Cache, content_key
from prbench.errors import DataError, PrbenchError
from prbench.retrieval import Retriever
from prbench.schema import ProfilePost, RubricAspect, SourceItem

CONDITIONS = ("none", "profile", "planner", "oracle", "wrong-profile")
PROFILE_HEADER = "Earlier posts by this user (most relevant first):"
ASPECTS_HEADER = {
    "planner": "What this user probably expects from an answer:",
    "oracle": "What this user expects from an answer:",
}


@dataclass(frozen=True)
class View:
    """One example as an RM may see it under one condition. Responses are added by the RM."""

    example_id: str
    question: str
    condition: str
    posts: tuple[ProfilePost, ...] = ()
    aspects: tuple[RubricAspect, ...] = ()
    max_context_chars: int | None = None
    user_id: str | None = None  # whose context this is; None under `none` (the condition withholds it)
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def context(self, n_posts: int | None = None) -> str:
        """The user context as text; `n_posts` keeps only the most relevant posts (token budgets)."""
        if self.aspects:
            lines = [f"- {a.aspect}" + (f": {a.reason}" if a.reason else "") for a in self.aspects]
            return "\n".join([ASPECTS_HEADER[self.condition], *lines])
        posts = self.posts if n_posts is None else self.posts[:n_posts]
        if not posts:
            return ""
        lines = [f"- [{p.category}] {p.text}" if p.category else f"- {p.text}" for p in posts]
        return "\n".join([PROFILE_HEADER, *lines])

    @property
    def shown_posts(self) -> int:
        """Posts that fit the character budget (least relevant dropped first)."""
        if self.max_context_chars is None:
            return len(self.posts)
        n = len(self.posts)
        while n > 0 and len(self.context(n)) > self.max_context_chars:
            n -= 1
        return n

    def prompt(self, n_posts: int | None = None) -> str:
        """The user turn an RM sees: context (if any) then the question."""
        n = self.shown_posts if n_posts is None else min(n_posts, self.shown_posts)
        ctx = self.context(n)
        return f"{ctx}\n\nQuestion: {self.question}" if ctx else self.question

    def key(self) -> str:
        """Content hash of everything shown, for caches."""
        # The id is part of it: some scorers (baseline:random) depend on the example, not only the text.
        return content_key(self.example_id, self.question, self.condition, self.context(), self.max_context_chars,
                           self.user_id)


def read_planner_file(path: str | Path) -> dict[str, list[RubricAspect]]:
    """Planner output: JSONL of {"id": ..., "aspects": [{"aspect", "reason"}, ...]}."""
    out: dict[str, list[RubricAspect]] = {}
    p = Path(path)
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out[str(rec["id"])] = [RubricAspect.model_validate(a) for a in rec["aspects"]]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(str(p), n, "aspects", f"bad planner record ({type(exc).__name__}: {exc})") from None
    return out


def _donor(example: SourceItem, pool: Sequence[SourceItem], seed: int) -> SourceItem:
    """A different user's item, chosen reproducibly from (seed, example id)."""
    def other(it: SourceItem) -> bool:
        if example.user_id and it.user_id:
            return it.user_id != example.user_id
        return it.id != example.id and {p.text for p in it.profile}.isdisjoint(p.text for p in example.profile)

    candidates = sorted((it for it in pool if other(it) and it.profile), key=lambda it: it.id)
    if not candidates:
        raise PrbenchError(f"wrong-profile: no other user's profile available for {example.id}")
    return random.Random(f"{seed}:wrong-profile:{example.id}").choice(candidates)


def build_view(
    example: SourceItem,
    condition: str,
    *,
    retriever: Retriever,
    top_k: int = 10,
    planner: Mapping[str, Sequence[RubricAspect]] | None = None,
    pool: Sequence[SourceItem] = (),
    seed: int = 0,
    max_context_chars: int | None = None,
    cache: Cache | None = None,
) -> View:
    """Build what an RM may see of `example` under `condition`."""
    base = {"example_id": example.id, "question": example.question, "condition": condition,
            "max_context_chars": max_context_chars}
    if condition == "none":
        return View(**base)
    uid = example.user_id or example.id
    if condition == "profile":
        return View(**base, user_id=uid, posts=tuple(retriever.top_k(example.question, example.profile, top_k, cache)))
    if condition == "wrong-profile":
        donor = _donor(example, pool, seed)
        posts = retriever.top_k(example.question, donor.profile, top_k, cache)
        return View(**base, user_id=donor.user_id or donor.id, posts=tuple(posts), meta={"donor": donor.id})
    if condition == "oracle":
        return View(**base, user_id=uid, aspects=tuple(RubricAspect(aspect=a.aspect, reason=a.reason)
                                                       for a in example.rubric_aspects))
    if condition == "planner":
        if planner is None:
            raise PrbenchError("condition 'planner' needs planner output (--planner-file or prbench plan)")
        if example.id not in planner:
            raise PrbenchError(f"planner output has no aspects for example {example.id!r}")
        return View(**base, user_id=uid, aspects=tuple(RubricAspect(aspect=a.aspect, reason=a.reason)
                                                       for a in planner[example.id]))
    raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(CONDITIONS)})")


def build_views(examples: Sequence[SourceItem], condition: str, **kwargs) -> list[View]:
    """Views for every example; the examples themselves are the wrong-profile donor pool."""
    kwargs.setdefault("pool", examples)
    return [build_view(ex, condition, **kwargs) for ex in examples]
