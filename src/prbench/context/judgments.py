"""What a user has judged, as signed evidence: the one reader of stances for personalized methods.

A profile can hold more than posts. Real per-person data is mostly judgments: votes on statements
(Polis), ratings (PRISM), earlier chosen / rejected pairs (PersonalRewardBench, SynthesizeMe). A
method that reads a profile as a bag of text learns a domain's style; one that reads *signed*
evidence can learn what this person endorses and what they reject.

Sources, in order of precedence for one profile post:
- an explicit `stance` field (`{"text": ..., "stance": "disagree"}`);
- a leading first-person verdict in the text, the convention of converted vote data
  ("I agree: ...", "I disagree: ...", "I wrote: ..."), read only when no `stance` is given;
- otherwise a plain post: something the user wrote, endorsed (+1).
A past choice in the profile (`{prompt, chosen, rejected}`, stance "chose") and an earlier
preference pair (`history`) give their chosen answer +1 and their rejected one -1.

`describe` is how a judgment reads to a judge or a text-reading RM ("agreed with: ...",
"disagreed with: ...", "chose: ... / over: ..."): the sign is always in the words, never
flattened away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prbench.schema import STANCE_SIGNS, HistoryPair, ProfilePost, SourceItem

_PREFIX = re.compile(r"^\s*I\s+(agree|disagree|wrote|like|dislike)\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Evidence:
    """One signed piece of what a user judged: `sign` +1 endorsed, -1 rejected, 0 no verdict."""

    text: str
    sign: float
    stance: str  # the stance word ("agree", "wrote", "chosen", ...); "post" for a plain post
    prompt: str = ""  # what the judgment answered, when known (history pairs)


def stance_of(post: ProfilePost) -> tuple[str, str]:
    """(stance, text) of a profile post: the explicit stance, else a leading "I agree:" verdict,
    else ("post", text). The text returned has any verdict prefix removed."""
    if post.stance:
        return post.stance.strip().lower(), _PREFIX.sub("", post.text, count=1) or post.text
    m = _PREFIX.match(post.text)
    if m and post.text[m.end():].strip():
        return m.group(1).lower(), post.text[m.end():]
    return "post", post.text


def sign_of(stance: str) -> float:
    """+1 / -1 / 0 for a stance word; a plain post counts as endorsed."""
    return 1.0 if stance == "post" else STANCE_SIGNS.get(stance, 0.0)


# How each stance reads in a prompt: the verdict in words, before the text it is on.
STANCE_WORDS: dict[str, str] = {
    "agree": "agreed with", "agreed": "agreed with", "like": "liked", "liked": "liked", "upvote": "upvoted",
    "wrote": "wrote", "endorse": "endorsed", "chose": "chose", "chosen": "chose",
    "disagree": "disagreed with", "disagreed": "disagreed with", "dislike": "disliked", "disliked": "disliked",
    "downvote": "downvoted", "rejected": "rejected", "reject": "rejected",
    "pass": "passed on (no vote)", "neutral": "was neutral on", "unsure": "was unsure about",
}


def describe(post: ProfilePost) -> str:
    """The post as a judge reads it: the text of a plain post; "agreed with: TEXT" for a stance;
    "asked: P / chose: A / over: B" (one line each) for a past choice."""
    stance, text = stance_of(post)
    if post.is_choice:
        asked = f"asked: {post.prompt}\n  " if post.prompt else ""
        return f"{asked}chose: {text}\n  over: {post.rejected}"
    if stance == "post":
        return text
    about = f" (asked: {post.prompt})" if post.prompt else ""
    return f"{STANCE_WORDS.get(stance, stance)}{about}: {text}"


def post_evidence(posts: Iterable[ProfilePost]) -> list[Evidence]:
    """One Evidence per post; a past choice gives two (its chosen text +1, its rejected one -1)."""
    out = []
    for post in posts:
        stance, text = stance_of(post)
        out.append(Evidence(text=text, sign=sign_of(stance), stance=stance, prompt=post.prompt or ""))
        if post.is_choice:
            out.append(Evidence(text=post.rejected or "", sign=-1.0, stance="rejected", prompt=post.prompt or ""))
    return out


def pair_evidence(pairs: Iterable[HistoryPair]) -> list[Evidence]:
    out = []
    for p in pairs:
        out.append(Evidence(text=p.chosen, sign=1.0, stance="chosen", prompt=p.prompt))
        out.append(Evidence(text=p.rejected, sign=-1.0, stance="rejected", prompt=p.prompt))
    return out


def choices_as_posts(pairs: Iterable[HistoryPair]) -> list[ProfilePost]:
    """Earlier preference pairs as profile items (past choices), so the `profile` condition shows
    them as judgments and `wrong-profile` swaps them whole; ids and prompts kept."""
    return [ProfilePost(id=p.id, text=p.chosen, stance="chose", prompt=p.prompt, rejected=p.rejected) for p in pairs]


def example_evidence(example: SourceItem) -> list[Evidence]:
    """All of an example's judgments: its profile's (posts, stances, past choices), then its history's
    pairs that the profile does not already hold as choices (readers put a user's earlier pairs in both)."""
    held = {(p.prompt, p.text, p.rejected) for p in example.profile if p.is_choice}
    return post_evidence(example.profile) + pair_evidence(
        h for h in example.history if (h.prompt, h.chosen, h.rejected) not in held)


def endorsed_texts(posts: Iterable[ProfilePost]) -> list[str]:
    """The texts the user stands behind (sign +1): what an embedding or overlap scorer may treat as
    "like this user"; a rejected, disagreed or unvoted text is never among them."""
    return [e.text for e in post_evidence(posts) if e.sign > 0]


def has_judgments(posts: Iterable[ProfilePost]) -> bool:
    """True when any post carries a verdict other than "I wrote this"."""
    return any(e.stance not in ("post", "wrote") for e in post_evidence(posts))
