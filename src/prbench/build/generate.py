"""Write the chosen and rejected answer of each item with the generator engine.

Both answers see the same question and top-k profile posts; only the framing of the rubric
aspects differs (expected vs. unwanted). Each request is seeded from (seed, item id, role), so
a resumed or re-ordered build writes the same texts. Over-long answers are regenerated once
with a derived seed and a reminder of the limit; if still too long they are cut at the last
sentence boundary within the limit. Both events are recorded per answer and counted in the report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from prbench.build.calls import CachedEngine
from prbench.engines.base import GenParams, Messages
from prbench.evaluation.scoring import example_seed
from prbench.prompts import Prompt, load_prompt
from prbench.schema import RubricAspect, SourceItem

ROLES = ("chosen", "rejected")
NO_POSTS = "(no earlier posts available)"
_LABEL = re.compile(r"^\s*(?:\*\*)?(?:answer|response|chosen|rejected)(?: answer)?\s*:(?:\*\*)?\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[A-Za-z0-9)\]\"'”’%].*[.!?…][\"'”’)\]]*$|^[.!?…]+$")
_NUMBERING = re.compile(r"^\(?\d+[.)]$")


@dataclass
class Answer:
    """One generated answer and what happened to it on the way (for the record and the report)."""

    role: str
    text: str = ""
    words: int = 0
    first_words: int = 0
    regenerated: bool = False
    truncated: bool = False
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def count_words(text: str) -> int:
    """Whitespace-separated words: the unit of the 100-word limit and of every length statistic."""
    return len(text.split())


def clean_answer(text: str) -> str:
    """Strip whitespace, a leading 'Answer:' label and wrapping quotes that chat models like to add."""
    text = _LABEL.sub("", text.strip(), count=1).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def truncate_words(text: str, max_words: int) -> str:
    """Cut `text` to at most `max_words` words, ending at the last sentence boundary that fits.

    If not even the first sentence fits, the cut falls after word `max_words` and an ellipsis
    marks it. Line breaks inside the kept part are preserved.
    """
    spans = [m for m in re.finditer(r"\S+", text)]
    if len(spans) <= max_words:
        return text
    cut = None
    for m in spans[:max_words]:
        word = m.group(0)
        if _SENTENCE_END.search(word) and not _NUMBERING.match(word):
            cut = m.end()
    if cut is not None:
        return text[:cut].rstrip()
    last = spans[max_words - 1]
    return text[: last.end()].rstrip(",;:-–—") + "…"


def format_aspects(aspects: Sequence[RubricAspect]) -> str:
    """Aspect titles with their reasons; the evidence span (narrative text) is left out."""
    return "\n".join(f"- {a.aspect}" + (f" ({a.reason})" if a.reason else "") for a in aspects)


def generation_messages(
    prompt: Prompt, item: SourceItem, posts: str, max_words: int, reminder: str = ""
) -> Messages:
    """The single user turn that asks for one answer."""
    text = prompt.render(question=item.question, posts=posts or NO_POSTS, aspects=format_aspects(item.rubric_aspects),
                         max_words=str(max_words), reminder=reminder)
    return [{"role": "user", "content": text}]


def _reminder(words: int, max_words: int) -> str:
    return (f"\n\nImportant: a previous draft had {words} words, which is over the limit. "
            f"Keep this answer to {max_words} words or fewer.")


def generate_pairs(
    engine: CachedEngine,
    items: Sequence[SourceItem],
    posts: Sequence[str],
    *,
    seed: int,
    max_words: int,
    params: GenParams,
    prompts: dict[str, Prompt] | None = None,
) -> list[dict[str, Answer]]:
    """Chosen and rejected answers for each item (one batched call, plus one for regenerations)."""
    prompts = prompts or {r: load_prompt(f"build_{r}") for r in ROLES}
    jobs = [(i, role) for i in range(len(items)) for role in ROLES]
    msgs = [generation_messages(prompts[role], items[i], posts[i], max_words) for i, role in jobs]
    plist = [_with_seed(params, example_seed(seed, items[i].id, f"generate-{role}")) for i, role in jobs]
    gens = engine.generate(msgs, plist)
    out: list[dict[str, Answer]] = [{} for _ in items]
    retry: list[int] = []
    for j, ((i, role), g) in enumerate(zip(jobs, gens)):
        ans = Answer(role)
        if g.error:
            ans.error = f"generator error: {g.error}"
        else:
            ans.text = clean_answer(g.text)
            ans.words = ans.first_words = count_words(ans.text)
            if not ans.text:
                ans.error = "generator returned an empty answer"
            elif ans.words > max_words:
                retry.append(j)
        out[i][role] = ans
    if retry:
        rmsgs, rparams = [], []
        for j in retry:
            i, role = jobs[j]
            rmsgs.append(generation_messages(prompts[role], items[i], posts[i], max_words,
                                             _reminder(out[i][role].first_words, max_words)))
            rparams.append(_with_seed(params, example_seed(seed, items[i].id, f"generate-{role}-retry")))
        for j, g in zip(retry, engine.generate(rmsgs, rparams)):
            i, role = jobs[j]
            ans = out[i][role]
            ans.regenerated = True
            text = clean_answer(g.text) if not g.error else ""
            if text:  # a failed or empty retry keeps the first draft, which is then truncated
                ans.text, ans.words = text, count_words(text)
            if ans.words > max_words:
                ans.text = truncate_words(ans.text, max_words)
                ans.words = count_words(ans.text)
                ans.truncated = True
    return out


def _with_seed(params: GenParams, seed: int) -> GenParams:
    return replace(params, seed=seed)
