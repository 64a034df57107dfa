"""Training pairs that carry the user's identity, and per-user train/validation/test splits.

Personalized RMs (Bradley-Terry with user context, PAL) learn from (user, prompt, chosen,
rejected). Benchmark `Example`s convert to pairs losslessly enough for training: the user is
`example.user_id`, falling back to the example id (LaMP-QA has one asking user per item).
Files of pairs load through the same machinery as benchmark files (`iter_raw` + `parse_record`),
so every error names file, line and field; a benchmark-format record (it has `question` and no
`prompt`) is accepted in the same file and converted.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from prbench.errors import DataError, PrbenchError
from prbench.raw import parse_record
from prbench.schema import (
    NO_CATEGORY,
    Example,
    ProfilePost,
    RubricAspect,
    SourceItem,
    _id_text,
    _nonblank,
    _Record,
    profile_items,
)
from prbench.store.cache import content_key


class PreferencePair(_Record):
    """One preference of one user. `profile`, `category` and `rubric_aspects` are optional.

    `profile` lets user-context models build the same views as the benchmark; `rubric_aspects`
    only matter for training under the `oracle` condition (an upper bound, never the default).
    """

    user_id: str
    prompt: str
    chosen: str
    rejected: str
    profile: list[ProfilePost] = Field(default_factory=list)
    id: str | None = None
    category: str | None = None
    rubric_aspects: list[RubricAspect] = Field(default_factory=list)

    _ids = field_validator("user_id", "id", mode="before")(_id_text)
    _texts = field_validator("user_id", "prompt", "chosen", "rejected")(_nonblank)
    _profile = field_validator("profile", mode="before")(profile_items)

    @property
    def key(self) -> str:
        """The pair's id, or a stable content hash when the file gave none (seeds and splits use it)."""
        return self.id or "pair-" + content_key(self.user_id, self.prompt, self.chosen, self.rejected)[:16]

    def to_source(self) -> SourceItem:
        """The pair as a source item, so `conditions.build_view` can build its RM view."""
        return SourceItem(
            id=self.key, question=self.prompt, profile=list(self.profile),
            rubric_aspects=list(self.rubric_aspects), category=self.category or NO_CATEGORY,
            user_id=self.user_id,
        )


def pair_from_example(example: Example) -> PreferencePair:
    """A benchmark example as a training pair; user falls back to the example id."""
    extra = {"persona": example.persona} if example.persona else {}
    return PreferencePair(
        user_id=example.user_id or example.id, prompt=example.question, chosen=example.chosen,
        rejected=example.rejected, profile=list(example.profile), id=example.id,
        category=example.category, rubric_aspects=list(example.rubric_aspects), **extra,
    )


def pairs_from_examples(examples: Iterable[Example]) -> list[PreferencePair]:
    return [pair_from_example(ex) for ex in examples]


def _is_benchmark_record(raw: object) -> bool:
    return isinstance(raw, dict) and "question" in raw and "prompt" not in raw


def iter_pairs(src: str | Path, split: str = "test", format: str | None = None) -> Iterable[PreferencePair]:
    """Validated pairs in file order; benchmark records are converted; duplicate ids are an error.

    Any other benchmark format (`format`, or detected: rewardbench2, prism, hh-rlhf ...) is read
    by its reader and converted pair by pair (a multi-turn item keeps only its last user turn as
    the prompt: PreferencePair has no dialogue).
    """
    from prbench.data.loaders import check_one_format
    from prbench.formats import resolve

    if format is None:
        check_one_format(src, split)
    if format or resolve(src, None, split).name not in ("prb", "lamp-qa"):
        from prbench.data.loaders import iter_examples

        for ex in iter_examples(src, "benchmark", split=split, format=format):
            if not isinstance(ex, Example):  # kind "benchmark" reads Examples only; say so if that ever breaks
                raise PrbenchError(f"{src}: expected benchmark examples, got a {type(ex).__name__}")
            yield pair_from_example(ex)
        return
    from prbench.raw import split_rows

    seen: dict[str, str] = {}
    for file, line, raw in split_rows(src, split):  # a row marked `split: test` is never a train pair
        if _is_benchmark_record(raw):
            pair = pair_from_example(parse_record(raw, Example, file, line))
        else:
            pair = parse_record(raw, PreferencePair, file, line, any_category=True)
        if pair.id is not None:
            if pair.id in seen:
                raise DataError(file, line, "id", f"duplicate id {pair.id!r} (first at {seen[pair.id]})")
            seen[pair.id] = f"{file}:{line}"
        yield pair


def load_pairs(src: str | Path, *, limit: int | None = None, split: str = "test",
               format: str | None = None) -> list[PreferencePair]:
    """Load pairs (or benchmark examples of any format, converted) from any source `load_examples` accepts."""
    pairs = list(iter_pairs(src, split, format))
    if not pairs:
        raise DataError(str(src), None, None, "no preference pairs found")
    return pairs[:limit] if limit is not None else pairs


def load_training_pairs(src: str | Path, split: str = "train", format: str | None = None) -> list[PreferencePair]:
    """The pairs to train on: the `split` part (train by default) of `src`.

    Why: training on the rows a benchmark scores inflates every later eval of the model. A source
    whose `split` part is empty while its test part is not is refused with one line; training on
    test pairs takes `--split test`, said aloud.
    """
    try:
        pairs = list(iter_pairs(src, split, format))
    except DataError as exc:
        if split != "train" or not exc.reason.startswith(("no rows in split", "no records")):
            raise
        pairs = []
    if pairs:
        return pairs
    if split == "train":
        try:
            n_test = sum(1 for _ in iter_pairs(src, "test", format))
        except DataError:
            n_test = 0
        if n_test:
            raise DataError(str(src), None, "split", f"no train pairs: all {n_test} pairs are in the test split "
                                                     "(train on test pairs only with --split test)")
    raise DataError(str(src), None, "split", f"no preference pairs in split {split!r}")


def _counts(n: int, fractions: Sequence[float]) -> list[int]:
    """Largest-remainder rounding of n * fractions (ties go to the earlier split): sums to n."""
    raw = [n * f for f in fractions]
    counts = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def _cut(items: list, counts: Sequence[int]) -> list[list]:
    out, start = [], 0
    for c in counts:
        out.append(items[start : start + c])
        start += c
    return out


def split_by_user(
    pairs: Sequence[PreferencePair],
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    by: Literal["pair", "user"] = "pair",
    group: Callable[[str], str] | None = None,
) -> tuple[list[PreferencePair], ...]:
    """Split pairs into len(fractions) parts; every pair lands in exactly one part.

    - `by="pair"` (default): each user's pairs are shuffled (seeded by (seed, user)) and cut by
      `fractions`, so every user appears in the splits their pair count allows: training sees
      every user (what PAL's per-user weights need), test asks about *seen* users.
    - `by="user"`: users are shuffled and cut by `fractions`; a user's pairs all land in one part,
      so test users are *unseen* (what few-shot adaptation and profile-reading models need).
      `group(user_id)` (by="user" only) keeps related users in one part, e.g. synthetic twins
      (`synth_users.twin_group`) so a held-out set stays balanced.

    The result depends only on the set of pairs and the seed, not on their input order.
    """
    if not fractions or any(f < 0 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise PrbenchError(f"split fractions must be non-negative and sum to 1, got {tuple(fractions)}")
    if group is not None and by != "user":
        raise PrbenchError("split_by_user: group= only applies to by='user'")
    by_user: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in pairs:
        by_user[p.user_id].append(p)
    for items in by_user.values():
        items.sort(key=lambda p: p.key)
    parts: list[list[PreferencePair]] = [[] for _ in fractions]
    if by == "user":
        units: dict[str, list[str]] = defaultdict(list)
        for u in sorted(by_user):
            units[group(u) if group else u].append(u)
        keys = sorted(units)
        random.Random(f"{seed}:split-users").shuffle(keys)
        for i, chunk in enumerate(_cut(keys, _counts(len(keys), fractions))):
            parts[i] = [p for k in chunk for u in units[k] for p in by_user[u]]
    elif by == "pair":
        for u in sorted(by_user):
            items = list(by_user[u])
            random.Random(f"{seed}:split-pairs:{u}").shuffle(items)
            for i, chunk in enumerate(_cut(items, _counts(len(items), fractions))):
                parts[i].extend(chunk)
    else:
        raise PrbenchError(f"split_by_user: by must be 'pair' or 'user', got {by!r}")
    return tuple(parts)


def users_of(pairs: Iterable[PreferencePair]) -> list[str]:
    """Distinct user ids in first-seen order."""
    return list(dict.fromkeys(p.user_id for p in pairs))
