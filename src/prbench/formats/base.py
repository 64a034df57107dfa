"""What every format reader shares: the reader interface, located errors and small parsers.

A reader turns the rows of one upstream format into prbench records (`Example` pairs or
`SourceItem` sources). It is registered in `prbench.registry.FORMATS` under its name; the
spec after the first colon carries its options (`prism:user:0.2`). `matches(row)` says from
a row's columns whether the reader knows the shape, which is how a format is detected.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from prbench.errors import DataError, SpecError
from prbench.schema import Example, HistoryPair, Message, SourceItem
from prbench.stats import metrics

ROLE_ALIASES = {"user": "user", "human": "user", "assistant": "assistant", "model": "assistant", "gpt": "assistant",
                "bot": "assistant", "system": "system"}


class Reader:
    """One data format. Subclasses set the class attributes and implement `matches` and `read`."""

    name: ClassVar[str]
    kind: ClassVar[Literal["benchmark", "source"]] = "benchmark"
    source: ClassVar[str] = ""  # where the format is defined (repository file, card)
    fields: ClassVar[str] = ""  # the exact fields read, for docs and `prbench data formats`
    priority: ClassVar[int] = 50  # detection order: specific shapes (low) before general ones (high)
    syntax: ClassVar[str] = ""  # the options it takes after `NAME:` (empty: none; anything given is refused)
    # The columns its rows must have, one tuple per row shape it reads: what `prbench data detect`
    # names, with the missing ones, when no reader claims a row (`prbench.formats.nearest`).
    shapes: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # The headline rule, in words (`prbench data formats`); formats with a benchmark's own rule
    # say whose code they follow and set `format` on their records so `score` computes it.
    headline: ClassVar[str] = "accuracy: prbench's (ties 0.5), bootstrap CI"

    def __init__(self, rest: str = "", **options: Any):
        if rest and not self.syntax:  # `rewardbench:anything` must not read as plain rewardbench
            raise SpecError(f"format {self.name!r} takes no options, got {self.name}:{rest}")
        self.rest = rest
        self.options = options

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, SourceItem]]:
        """(file, line, record) for every record of `split`; line is the row the record came from."""
        raise NotImplementedError

    @classmethod
    def score(cls, records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        """The benchmark's own headline from this format's per-pair records (None: no rule of its own)."""
        return None


def rows(src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Any]]:
    """(file, line, raw row) of every record in `src`, rows that are not objects refused."""
    from prbench.raw import iter_raw

    for file, line, raw in iter_raw(src, split):
        if not isinstance(raw, dict):
            raise DataError(file, line, None, f"a record must be a JSON object, got {type(raw).__name__}")
        yield file, line, raw


def text(row: Mapping[str, Any], key: str, file: str, line: int, *, field: str | None = None) -> str:
    """A required non-blank string field."""
    value = row.get(key)
    where = field or key
    if value is None:
        raise DataError(file, line, where, "missing required field")
    if not isinstance(value, str):
        raise DataError(file, line, where, f"must be text (got {type(value).__name__})")
    if not value.strip():
        raise DataError(file, line, where, "must not be empty")
    return value


def message(value: Any, file: str, line: int, field: str) -> Message:
    """One {role, content} message; upstream role names (human, model, gpt) mapped to user/assistant."""
    if not isinstance(value, dict):
        raise DataError(file, line, field, f"a message must be an object with role and content "
                                           f"(got {type(value).__name__})")
    role = value.get("role")
    if not isinstance(role, str) or role.lower() not in ROLE_ALIASES:
        raise DataError(file, line, f"{field}.role", f"unknown role {role!r} (use user, assistant or system)")
    content = value.get("content")
    if not isinstance(content, str) or not content.strip():
        raise DataError(file, line, f"{field}.content", "must be non-empty text")
    return Message(role=ROLE_ALIASES[role.lower()], content=content)


def messages(value: Any, file: str, line: int, field: str) -> list[Message]:
    if not isinstance(value, list):
        raise DataError(file, line, field, f"must be a list of messages (got {type(value).__name__})")
    return [message(m, file, line, f"{field}[{i}]") for i, m in enumerate(value)]


def split_last_user(turns: list[Message], file: str, line: int, field: str) -> tuple[list[Message], str]:
    """(dialogue before, last user message): what is judged answers the last user turn."""
    if not turns or turns[-1].role != "user":
        raise DataError(file, line, field, "must end with a user message (the turn the responses answer)")
    return turns[:-1], turns[-1].content


_HH_TURN = re.compile(r"\n\n(Human|Assistant): ?")
_DSP_TURN = re.compile(r"(?:^|\n\n)## (Human|Assistant):\n")


def parse_transcript(value: str, file: str, line: int, field: str) -> list[Message]:
    """An HH-style transcript ("\\n\\nHuman: ...\\n\\nAssistant: ...", or DSP's "## Human:") as messages."""
    pattern = _DSP_TURN if value.lstrip("\n").startswith("## Human:") else _HH_TURN
    parts = pattern.split(value)
    if len(parts) < 3 or parts[0].strip():
        raise DataError(file, line, field, "not a Human/Assistant transcript (expected it to start with "
                                           "'\\n\\nHuman:' or '## Human:')")
    out = []
    for speaker, content in zip(parts[1::2], parts[2::2]):
        out.append(Message(role="user" if speaker == "Human" else "assistant", content=content))
    return out


def split_at_last_assistant(turns: list[Message], file: str, line: int,
                            field: str) -> tuple[list[Message], str, str]:
    """(dialogue before the last user turn, that user turn, the final assistant response)."""
    if len(turns) < 2 or turns[-1].role != "assistant" or turns[-2].role != "user":
        raise DataError(file, line, field, "must end with a user turn followed by an assistant response")
    if not turns[-1].content.strip():
        raise DataError(file, line, field, "the final assistant response is empty")
    return turns[:-2], turns[-2].content, turns[-1].content


class Skips:
    """Rows a reader leaves out: malformed ones when told to (`:skip`), and those its format's rule
    drops (`drop`), each counted by reason with its first place, and warned about once."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.errors: list[DataError] = []
        self.dropped: dict[str, list[tuple[str, int]]] = {}

    def drop(self, reason: str, file: str, line: int) -> None:
        self.dropped.setdefault(reason, []).append((file, line))

    def keep(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(...) or, when skipping and fn raises a DataError, None (the error is kept)."""
        try:
            return fn(*args, **kwargs)
        except DataError as exc:
            if not self.enabled:
                raise DataError(exc.file, exc.line, exc.field, f"{exc.reason} (':skip' leaves such rows out, counted)") \
                    from None
            self.errors.append(exc)
            return None

    def report(self, name: str, src: str | Path) -> None:
        import warnings

        parts = []
        if self.errors:
            first = self.errors[0]
            parts.append(f"{len(self.errors)} malformed row(s), first at {first.file}:{first.line}: {first.field}: "
                         f"{first.reason}")
        parts += [f"{len(where)} row(s) with {reason}, first at {where[0][0]}:{where[0][1]}"
                  for reason, where in self.dropped.items()]
        if parts:
            warnings.warn(f"{src}: {name} left out " + "; ".join(parts), stacklevel=3)


def with_past_choices(example: Example, history: Sequence[HistoryPair]) -> Example:
    """`example` with its user's earlier pairs as its profile (past choices): what the `profile`
    condition may show of them (never the judged pair, never a later one: `eligible_history`)."""
    from prbench.context.conditions import eligible_history
    from prbench.context.judgments import choices_as_posts

    return example.model_copy(update={"profile": choices_as_posts(eligible_history(example, history))})


M = TypeVar("M", bound=BaseModel)


def build(cls: type[M], file: str, line: int, **fields: Any) -> M:
    """Validate a record, mapping the first pydantic error to a located DataError."""
    from prbench.raw import _first_error

    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        where, reason = _first_error(exc)
        raise DataError(file, line, where, reason) from None


def row_id(src: str | Path, file: str, line: int, head: str | None = None) -> str:
    """The id of a row that gives none: `HEAD:LINE` (HEAD: the file's stem unless given).

    Read from a folder, the file's path under it leads (`sub/name:LINE`, `name:HEAD:LINE`), so
    the rows of two files never share an id (two files of one subset, or one name in two subfolders).
    """
    root = Path(str(src))
    try:
        inside = Path(file).relative_to(root).as_posix() if root.is_dir() else None
    except (ValueError, OSError):
        inside = None
    if inside is None:
        return f"{head or stem(file)}:{line}"
    lead = inside[: len(inside) - len(Path(inside).name)] + stem(inside)
    return f"{lead}:{head}:{line}" if head else f"{lead}:{line}"


def stem(file: str) -> str:
    name = Path(file).name
    for suffix in (".jsonl.gz", ".jsonl", ".json", ".parquet"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def item_score(name: str, upstream: str, records: Sequence[dict[str, Any]], definition: str) -> dict[str, Any]:
    """A pooled fraction of items won outright (rule `strict` / `beats-all`), overall and per category."""
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_item[r["item"]].append(r)
    groups: dict[str, list[float]] = defaultdict(list)
    for pairs in by_item.values():
        credit = metrics.item_credit(pairs[0]["rule"], pairs)
        if credit is not None:  # invalid: counted in n_invalid, as everywhere in prbench
            groups[pairs[0]["category"]].append(credit)
    every = [c for v in groups.values() for c in v]
    return {"name": name, "upstream": upstream, "value": float(np.mean(every)) if every else None, "n": len(every),
            "groups": {g: float(np.mean(v)) for g, v in sorted(groups.items())}, "definition": definition,
            "accuracy_is": "the benchmark's number (this value); its CI is prbench's (bootstrap over items)"}
