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
Earlier preference pairs (`history`) give their chosen answer +1 and their rejected one -1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prbench.schema import HistoryPair, ProfilePost

# Stance words and their sign: +1 the user stands behind the text, -1 they reject it, 0 no verdict.
STANCE_SIGNS: dict[str, float] = {
    "agree": 1.0, "agreed": 1.0, "like": 1.0, "liked": 1.0, "upvote": 1.0, "chose": 1.0, "chosen": 1.0,
    "wrote": 1.0, "endorse": 1.0,
    "disagree": -1.0, "disagreed": -1.0, "dislike": -1.0, "disliked": -1.0, "downvote": -1.0,
    "rejected": -1.0, "reject": -1.0,
    "pass": 0.0, "neutral": 0.0, "unsure": 0.0,
}
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


def post_evidence(posts: Iterable[ProfilePost]) -> list[Evidence]:
    out = []
    for post in posts:
        stance, text = stance_of(post)
        out.append(Evidence(text=text, sign=sign_of(stance), stance=stance))
    return out


def pair_evidence(pairs: Iterable[HistoryPair]) -> list[Evidence]:
    out = []
    for p in pairs:
        out.append(Evidence(text=p.chosen, sign=1.0, stance="chosen", prompt=p.prompt))
        out.append(Evidence(text=p.rejected, sign=-1.0, stance="rejected", prompt=p.prompt))
    return out


def has_judgments(posts: Iterable[ProfilePost]) -> bool:
    """True when any post carries a verdict other than "I wrote this"."""
    return any(e.stance not in ("post", "wrote") for e in post_evidence(posts))
