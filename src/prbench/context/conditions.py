"""What a reward model may see for one example: the ONLY reader of profile and rubric for RM input.

Conditions (the paper's, plus a control):
- `none`: question only.
- `profile`: the top-k retrieved profile posts, then the question.
- `planner`: aspects a planner predicted from the profile (read from a file keyed by id).
- `oracle`: the true rubric aspects (title and reason; never the evidence span, which is
  narrative text): the upper bound.
- `wrong-profile`: top-k posts of a different user, chosen by (seed, example id): a control
  that should score no better than `none`.
- `history`: the top-k earlier preference pairs of this user (`example.history`, which a
  format reader fills from the training part of the same data), ranked by the retriever
  against the question. The judged pair itself is never shown (same id, item or texts), nor
  any pair later than the judged one when both carry a time.
- `persona`: the user's stated preferences or self-description (`example.persona`).
- `wrong-history` / `wrong-persona`: the same from a different user, chosen by (seed,
  example id): controls, like `wrong-profile`.
`narrative` never reaches a reward model under any condition. Multi-turn items carry their
dialogue so far in `View.turns`; RMs render `View.messages()` with their chat template.

Profiles made of judgments (stances, past choices; `prbench.context.judgments`) are shown as judgments:
text-reading RMs and judges read "agreed with: ...", "disagreed with: ...", "chose: ... over:
..." (`View.context`); embedding and overlap scorers get only what the user endorsed
(`View.context_texts`); personalized methods get the signed evidence (`View.evidence`).
`wrong-profile` swaps the whole profile, judgments and all. A condition whose field a record
lacks (`oracle` without `rubric_aspects`, `planner` without planner output for it) is refused
in one line before anything is scored (`require_fields`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prbench.context.judgments import (
    Evidence,
    describe,
    endorsed_texts,
    has_judgments,
    pair_evidence,
    post_evidence,
)
from prbench.context.retrieval import Retriever, load_retriever
from prbench.errors import DataError, PrbenchError
from prbench.schema import HistoryPair, Message, ProfilePost, RubricAspect, SourceItem
from prbench.store.cache import Cache, content_key

CONDITIONS = ("none", "profile", "planner", "oracle", "wrong-profile")  # the paper's
# For users known by their earlier choices or their own words (formats that carry them).
HISTORY_CONDITIONS = ("history", "persona", "wrong-history", "wrong-persona")
ALL_CONDITIONS = CONDITIONS + HISTORY_CONDITIONS
PROFILE_HEADER = "Earlier posts by this user (most relevant first):"
JUDGMENTS_HEADER = "What this user wrote and judged before (most relevant first):"
HISTORY_HEADER = "Earlier choices of this user (most relevant first):"
PERSONA_HEADER = "What this user says about themselves and what they want:"
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
    turns: tuple[Message, ...] = ()  # the dialogue before the last user message (`question`)
    pairs: tuple[HistoryPair, ...] = ()  # earlier preference pairs shown (history conditions)
    persona: str = ""  # stated preferences / self-description shown (persona conditions)

    @property
    def units(self) -> int:
        """Droppable pieces of user context (posts, history pairs, or the persona as one)."""
        return len(self.posts) or len(self.pairs) or (1 if self.persona else 0)

    def context_texts(self) -> list[str]:
        """The shown user context as separate texts the user stands behind (aspects aside): posts,
        statements they agreed with, answers they chose (in past choices or history pairs), or their
        persona. Embedding and overlap scorers compare a response with each; what the user
        disagreed with or passed over is never among them (`evidence` has it, signed)."""
        if self.pairs:
            return [p.chosen for p in self.pairs[: self.shown_posts]]
        if self.persona:
            return [self.persona]
        return endorsed_texts(self.posts[: self.shown_posts])

    def evidence(self) -> list[Evidence]:
        """The shown user context as signed evidence (`prbench.context.judgments`), within the character
        budget: what personalized methods learn from. Aspects and personas carry no verdict: []."""
        if self.pairs:
            return pair_evidence(self.pairs[: self.shown_posts])
        return post_evidence(self.posts[: self.shown_posts])

    def context(self, n_posts: int | None = None) -> str:
        """The user context as text; `n_posts` keeps only the most relevant pieces (token budgets)."""
        if self.aspects:
            lines = [f"- {a.aspect}" + (f": {a.reason}" if a.reason else "") for a in self.aspects]
            return "\n".join([ASPECTS_HEADER[self.condition], *lines])
        if self.pairs:
            pairs = self.pairs if n_posts is None else self.pairs[:n_posts]
            lines = [f"- Asked: {p.prompt}\n  Preferred: {p.chosen}\n  Over: {p.rejected}" for p in pairs]
            return "\n".join([HISTORY_HEADER, *lines]) if pairs else ""
        if self.persona:
            return "" if n_posts == 0 else f"{PERSONA_HEADER}\n{self.persona}"
        posts = self.posts if n_posts is None else self.posts[:n_posts]
        if not posts:
            return ""
        # Plain posts read exactly as they always have; a judgment reads as one (prbench.context.judgments.describe).
        lines = [f"- [{p.category}] {describe(p)}" if p.category else f"- {describe(p)}" for p in posts]
        return "\n".join([JUDGMENTS_HEADER if has_judgments(posts) else PROFILE_HEADER, *lines])

    @property
    def shown_posts(self) -> int:
        """Pieces of context that fit the character budget (least relevant dropped first)."""
        n = self.units
        if self.max_context_chars is None:
            return n
        while n > 0 and len(self.context(n)) > self.max_context_chars:
            n -= 1
        return n

    def messages(self, n_posts: int | None = None) -> list[dict[str, str]]:
        """Chat messages before the response: the dialogue so far, then the user turn `prompt(n)`.

        The user context goes in front of the last user message, next to what is judged, as
        in single-turn items; earlier turns are passed as they are, for the chat template.
        """
        return [*({"role": m.role, "content": m.content} for m in self.turns),
                {"role": "user", "content": self.prompt(n_posts)}]

    def transcript(self) -> str:
        """Earlier turns as text, for text-prompted judges ('' for a single-turn item)."""
        return "\n\n".join(f"{m.role.capitalize()}: {m.content}" for m in self.turns)

    def prompt(self, n_posts: int | None = None) -> str:
        """The user turn an RM sees: context (if any) then the question."""
        n = self.shown_posts if n_posts is None else min(n_posts, self.shown_posts)
        ctx = self.context(n)
        return f"{ctx}\n\nQuestion: {self.question}" if ctx else self.question

    def key(self) -> str:
        """Content hash of everything shown, for caches."""
        # The id is part of it: some scorers (baseline:random) depend on the example, not only the text.
        parts: list[Any] = [self.example_id, self.question, self.condition, self.context(), self.max_context_chars,
                            self.user_id]
        if self.turns:  # only multi-turn views add it, so single-turn keys (and caches) stay as they were
            parts.append([(m.role, m.content) for m in self.turns])
        return content_key(*parts)


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


_DONOR_NEEDS = {"wrong-profile": ("profile", "profile"), "wrong-history": ("history", "history"),
                "wrong-persona": ("persona", "persona")}


def _donor(example: SourceItem, pool: Sequence[SourceItem], seed: int, condition: str = "wrong-profile") -> SourceItem:
    """A different user's item that has what `condition` shows, chosen reproducibly from (seed, example id)."""
    attr, what = _DONOR_NEEDS[condition]

    def other(it: SourceItem) -> bool:
        if example.user_id and it.user_id:
            return it.user_id != example.user_id
        return it.id != example.id and {p.text for p in it.profile}.isdisjoint(p.text for p in example.profile)

    candidates = sorted((it for it in pool if other(it) and getattr(it, attr)), key=lambda it: it.id)
    if not candidates:
        raise PrbenchError(f"{condition}: no other user's {what} available for {example.id}")
    # The wrong-profile draw keeps its historical seed string, so earlier runs reproduce exactly.
    return random.Random(f"{seed}:{condition}:{example.id}").choice(candidates)


def _judged_keys(example: SourceItem) -> set[str]:
    keys = {example.id}
    item = getattr(example, "item_id", None)
    if item:
        keys.add(item)
    return keys


def eligible_history(example: SourceItem, history: Sequence[HistoryPair]) -> list[HistoryPair]:
    """History pairs that may be shown for `example`: never the judged pair, never a later one.

    The judged pair is recognised by id (the pair's or its item's) and by content (same prompt
    with the same two responses, in either order: a swapped copy would tell the answer just as
    well), so a reader that copied it into history cannot leak it. Order is by real times only:
    when the judged pair has a time, an untimed history pair is never "earlier".
    """
    judged = _judged_keys(example)
    chosen, rejected = getattr(example, "chosen", None), getattr(example, "rejected", None)
    texts = {(example.question, chosen, rejected), (example.question, rejected, chosen)}
    out = []
    for h in history:
        if h.id in judged or (h.prompt, h.chosen, h.rejected) in texts:
            continue
        if example.time is not None and (h.time is None or h.time >= example.time):
            continue  # time known for the judged pair: only pairs known to be earlier
        out.append(h)
    return out


def _top_history(example: SourceItem, history: Sequence[HistoryPair], retriever: Retriever, k: int,
                 cache: Cache | None) -> tuple[HistoryPair, ...]:
    pairs = eligible_history(example, history)
    by_id = {h.id: h for h in pairs}
    as_posts = [ProfilePost(id=h.id, text=h.prompt) for h in pairs]
    return tuple(by_id[p.id] for p in retriever.top_k(example.question, as_posts, k, cache))


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
    # The pairs of one multi-response item share one view (its item id), so a response scores the same in each.
    base = View(example_id=getattr(example, "item_id", None) or example.id, question=example.question,
                condition=condition, max_context_chars=max_context_chars, turns=tuple(example.context))
    if condition == "none":
        return base
    uid = example.user_id or example.id
    if condition == "profile":
        return replace(base, user_id=uid, posts=tuple(retriever.top_k(example.question, example.profile, top_k, cache)))
    if condition == "wrong-profile":
        donor = _donor(example, pool, seed)
        posts = retriever.top_k(example.question, donor.profile, top_k, cache)
        return replace(base, user_id=donor.user_id or donor.id, posts=tuple(posts), meta={"donor": donor.id})
    if condition == "history":
        return replace(base, user_id=uid, pairs=_top_history(example, example.history, retriever, top_k, cache))
    if condition == "wrong-history":
        donor = _donor(example, pool, seed, condition)
        pairs = _top_history(example, donor.history, retriever, top_k, cache)
        return replace(base, user_id=donor.user_id or donor.id, pairs=pairs, meta={"donor": donor.id})
    if condition == "persona":  # a user without one is recorded as `no_context` (see no_context_failure)
        return replace(base, user_id=uid, persona=example.persona.strip() and example.persona)
    if condition == "wrong-persona":
        donor = _donor(example, pool, seed, condition)
        return replace(base, user_id=donor.user_id or donor.id, persona=donor.persona, meta={"donor": donor.id})
    if condition == "oracle":
        return replace(base, user_id=uid, aspects=tuple(RubricAspect(aspect=a.aspect, reason=a.reason)
                                                       for a in example.rubric_aspects))
    if condition == "planner":
        if planner is None:
            raise PrbenchError("condition 'planner' needs planner output (--planner-file or prbench plan)")
        if example.id not in planner:
            raise PrbenchError(f"planner output has no aspects for example {example.id!r}")
        return replace(base, user_id=uid, aspects=tuple(RubricAspect(aspect=a.aspect, reason=a.reason)
                                                       for a in planner[example.id]))
    raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(ALL_CONDITIONS)})")


_NO_CONTEXT_HINT = {
    "history": "no record has earlier pairs of its user: the data carries no history (formats that do: prism, "
               "personalrewardbench, prb with a history field)",
    "persona": "no record has stated preferences or a self-description of its user (a PRISM folder needs its "
               "survey.jsonl)",
    "profile": "no record has profile posts of its user",
}


def no_context_failure(condition: str, n_no_context: int, n_total: int) -> str | None:
    """Why a run under `condition` is not a measurement of it: no record had any context to show.

    Such a run would report the `none` number under the condition's name; a run where only some
    records lacked context is kept, with `no_context` on those records and counted in the summary.
    """
    if condition == "none" or not n_total or n_no_context < n_total:
        return None
    hint = _NO_CONTEXT_HINT.get(condition.removeprefix("wrong-"), "nothing of any user to show")
    return f"condition {condition!r}: all {n_total} records were scored without context ({hint}); use -c none"


# What each condition reads from a record, when the record may lack it (an own file without a rubric).
_NEEDS = {"oracle": "rubric_aspects"}


def require_fields(examples: Iterable[SourceItem], conditions: Sequence[str],
                   planner: Mapping[str, Sequence[RubricAspect]] | None = None) -> Iterator[SourceItem]:
    """`examples`, passed through; at their end, a `PrbenchError` in one line when a condition needs a
    field some records lack: `oracle` their `rubric_aspects`, `planner` planner output for their id.

    Why before scoring: such a record would be scored with nothing shown, under the condition's name
    (an `oracle` number that is partly `none`). Read in the pass that validates the data.
    """
    lacking: dict[str, list[str]] = {c: [] for c in conditions if c in _NEEDS or c == "planner"}
    n = 0
    for ex in examples:
        n += 1
        for c, ids in lacking.items():
            if c == "planner":
                if planner is not None and ex.id not in planner:
                    ids.append(ex.id)
            elif not getattr(ex, _NEEDS[c]):
                ids.append(ex.id)
        yield ex
    if "planner" in lacking and planner is None:
        raise PrbenchError("condition 'planner' needs planner output: give --planner-file (written by prbench plan)")
    for c, ids in lacking.items():
        if ids:
            field_name = _NEEDS.get(c, "planner output")
            raise PrbenchError(f"condition {c!r} needs {field_name}, which {len(ids)} of {n} records lack (first: "
                               f"{ids[0]!r}); run the others (none, profile, wrong-profile) or add {field_name}")


def build_views(examples: Sequence[SourceItem], condition: str, **kwargs: Any) -> list[View]:
    """Views for every example; the examples themselves are the wrong-profile donor pool."""
    kwargs.setdefault("pool", examples)
    return [build_view(ex, condition, **kwargs) for ex in examples]


TRAINABLE_CONDITIONS = ("none", "profile", "planner", "oracle", "wrong-profile")


def pair_views(
    pairs: Sequence[Any],
    condition: str,
    *,
    retriever: str | Retriever = "bm25",
    top_k: int = 10,
    planner: Mapping[str, Sequence[RubricAspect]] | None = None,
    seed: int = 0,
    max_context_chars: int | None = None,
    cache: Cache | None = None,
) -> list[View]:
    """The view of each preference pair (`prbench.data.pairs.PreferencePair`) under `condition`, as training
    and scoring trained RMs build it; the pairs themselves are the wrong-profile pool."""
    if condition not in TRAINABLE_CONDITIONS:
        raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(TRAINABLE_CONDITIONS)})")
    ret = load_retriever(retriever) if isinstance(retriever, str) else retriever
    sources = list(require_fields((p.to_source() for p in pairs), [condition], planner))  # never train `oracle` on nothing
    return [build_view(s, condition, retriever=ret, top_k=top_k, planner=planner, pool=sources, seed=seed,
                       max_context_chars=max_context_chars, cache=cache) for s in sources]
