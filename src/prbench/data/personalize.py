"""Annotator-level preference files -> personalized records (`prbench data personalize`).

Why: most preference data a lab holds is one row per judgment (who judged, the prompt, answer A,
answer B, the winner): crowd vendors' exports, arena logs (Chatbot Arena's `judge, model_a,
model_b, winner, conversation_a, conversation_b`), MT-Bench human judgments. A personalized RM
needs each judgment as one person's record whose profile is that person's *other* choices. This
module builds exactly that, with the two guards a personalized test needs:

- people are split, not rows: no test person's choice is ever a training record;
- the test is mirrored: a pair enters the test only as two records, chosen one way by one test
  person and the other way by another, so a scorer that ignores the profile gets exactly 50%.

A profile never holds the judged pair nor any other choice on the same prompt and answers (the
same person judging it again). Ties, rows whose two answers are the same text and annotators
with too few choices are left out and counted in `manifest.json`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from prbench.errors import DataError, PrbenchError
from prbench.raw import _iter_file, parse_record, short_text
from prbench.schema import Example

# Column names tried in order when a field is not named (first one present in the first row wins).
PROMPT_FIELDS = ("prompt", "question", "instruction", "query", "input", "context")
A_FIELDS = ("response_a", "answer_a", "completion_a", "output_a", "response_1", "response1", "conversation_a")
B_FIELDS = ("response_b", "answer_b", "completion_b", "output_b", "response_2", "response2", "conversation_b")
WINNER_FIELDS = ("winner", "preference", "overall_preference", "label", "choice")
# Winner values (compared lower-cased): Chatbot Arena / MT-Bench, vendors' A/B, 1/2 (PSOUPS-style).
A_WINS = ("model_a", "a", "1", "response_a", "answer_a", "response_1", "response1", "left")
B_WINS = ("model_b", "b", "2", "response_b", "answer_b", "response_2", "response2", "right")
TIES = ("tie", "tie (bothbad)", "tie(bothbad)", "both_bad", "bothbad", "both bad", "both good", "equal", "draw",
        "same")
ProfileOrder = Literal["sample", "recent"]


class PersonalizeConfig(BaseModel):
    """Everything `personalize` needs besides the file: field names, winner values, split and profile rules."""

    by: str = Field(description="The annotator field: one person per value.")
    prompt: str | None = Field(None, description=f"Prompt field (default: the first of {', '.join(PROMPT_FIELDS)}; "
                                                 "else the user turns of the A conversation).")
    a: str | None = Field(None, description=f"Answer A field (default: the first of {', '.join(A_FIELDS)}).")
    b: str | None = Field(None, description=f"Answer B field (default: the first of {', '.join(B_FIELDS)}).")
    winner: str | None = Field(None, description=f"Winner field (default: the first of {', '.join(WINNER_FIELDS)}).")
    a_wins: tuple[str, ...] = A_WINS
    b_wins: tuple[str, ...] = B_WINS
    ties: tuple[str, ...] = TIES
    signed: bool = Field(False, description="The winner is a signed score: < 0 A, > 0 B, 0 a tie (HelpSteer3).")
    turn: str = Field("turn", description="With conversation answers: the field naming the judged turn (1-based; "
                                          "MT-Bench's and Chatbot Arena's `turn`); absent: the last turn.")
    time: str | None = Field(None, description="Field ordering a person's choices for --profile-order recent "
                                               "(default: file order).")
    category: str | None = Field(None, description="Field copied to each record's category.")
    test_fraction: float = Field(0.5, gt=0, lt=1)
    seed: int = 0
    min_choices: int = Field(3, ge=2)
    profile_max: int = Field(30, ge=1)
    profile_order: ProfileOrder = "sample"


class Counts(BaseModel):
    rows: int = 0
    annotators: int = 0  # every annotator of the file, ties-only ones included
    ties: int = 0
    same_answers: int = 0
    choices: int = 0  # non-tie judgments of two different answers


class Manifest(BaseModel):
    """What `personalize` read, kept and left out (written as DIR/manifest.json)."""

    source: str
    sha256: str
    fields: dict[str, str]
    config: PersonalizeConfig
    counts: Counts
    too_few: dict[str, int]  # annotators with fewer than min_choices distinct pairs, and their choices
    people: dict[str, int]  # train / test / test_in_records (test people with a mirrored record)
    records: dict[str, int]  # train / test
    test_pairs: int  # mirrored pairs: two test records each
    test_choices_unmirrored: int  # test people's choices whose pair no other test person chose the other way
    profile: dict[str, float]  # min / median / max past choices per record


@dataclass(frozen=True)
class Choice:
    """One person's judgment: `chosen` preferred over `rejected` in answer to `prompt`."""

    person: str
    prompt: str
    chosen: str
    rejected: str
    line: int
    order: Any  # sort key for "recent": the time field, else the line
    category: str | None

    @property
    def key(self) -> tuple[str, frozenset[str]]:
        """The judged pair, whichever way it went: a profile never holds another choice with this key."""
        return self.prompt, frozenset((self.chosen, self.rejected))

    @property
    def id(self) -> str:
        return f"row{self.line}"


def _iter_csv(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV / TSV file as dicts, each with the line it starts on (the stdlib parser: quoted newlines)."""
    file = str(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh, delimiter="\t" if path.name.lower().endswith(".tsv") else ",")
            header = next(reader, None)
            if header is None:
                raise DataError(file, None, None, "empty file (no header row)")
            start = reader.line_num + 1
            for row in reader:
                if row:
                    if len(row) != len(header):
                        raise DataError(file, start, None, f"{len(row)} values for {len(header)} columns")
                    yield start, dict(zip(header, row, strict=True))
                start = reader.line_num + 1
    except UnicodeDecodeError as exc:
        raise DataError(file, None, None, f"not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise DataError(file, None, None, f"not readable as CSV ({exc})") from None
    except OSError as exc:
        raise DataError(file, None, None, f"cannot read ({exc.strerror or exc})") from None


def read_rows(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line or row, raw row) of a .jsonl(.gz) / .json / .parquet file (prbench's own readers) or a .csv / .tsv."""
    p = Path(path)
    if not p.is_file():
        raise DataError(str(path), None, None, "no such file")
    if p.name.lower().endswith((".csv", ".tsv")):
        return _iter_csv(p)
    return _iter_file(p)  # pyarrow, a core dependency, reads parquet


def _pick(row: dict[str, Any], named: str | None, candidates: Sequence[str], what: str, option: str,
          file: str, line: int) -> str:
    if named is not None:
        return named
    for name in candidates:
        if name in row:
            return name
    raise DataError(file, line, what, f"no {what} field (looked for {', '.join(candidates)}; name it with {option})")


def _messages(value: Any) -> list[tuple[str, str]] | None:
    """(role, content) of a chat transcript, or None when `value` is not one."""
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        return None
    if not all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value):
        return None
    return [(m["role"], m["content"]) for m in value]


def _text(value: Any, file: str, line: int, field: str) -> str:
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DataError(file, line, field, f"expected text or a list of {{role, content}} messages, got {got}")
    if not value.strip():
        raise DataError(file, line, field, "must not be empty")
    return value.strip()


def _prompt_text(value: Any, file: str, line: int, field: str) -> str:
    msgs = _messages(value)
    if msgs is None:
        return _text(value, file, line, field)
    if len(msgs) == 1:
        return _text(msgs[0][1], file, line, field)
    return "\n\n".join(f"{role}: {content.strip()}" for role, content in msgs)


def _turn_of(row: dict[str, Any], cfg: PersonalizeConfig, file: str, line: int) -> int | None:
    value = row.get(cfg.turn)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DataError(file, line, cfg.turn, f"a judged turn is a whole number from 1, got {short_text(value)}")
    return value


def _conversation(value: Any, turn: int | None, file: str, line: int, field: str) -> tuple[list[str], str]:
    """(user turns up to the judged one, the judged assistant answer) of a transcript."""
    msgs = _messages(value)
    if msgs is None:
        raise DataError(file, line, field, "expected a list of {role, content} messages (the other answer is one)")
    users = [c for r, c in msgs if r == "user"]
    answers = [c for r, c in msgs if r == "assistant"]
    k = turn if turn is not None else len(answers)
    if not answers or k > len(answers) or k > len(users):
        raise DataError(file, line, field, f"no assistant answer for turn {k} ({len(answers)} in the conversation)")
    return [u.strip() for u in users[:k]], _text(answers[k - 1], file, line, f"{field}[turn {k}]")


def _winner(value: Any, cfg: PersonalizeConfig, file: str, line: int, field: str) -> Literal["a", "b", "tie"]:
    if cfg.signed:
        try:
            x = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            x = None
        if x is None or math.isnan(x):
            raise DataError(file, line, field, f"expected a signed number (< 0 A, > 0 B, 0 tie), got "
                                               f"{short_text(value)}")
        return "a" if x < 0 else "b" if x > 0 else "tie"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        got = "null" if value is None else type(value).__name__
        raise DataError(file, line, field, f"expected a winner label, got {got}")
    word = (str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)).strip().lower()
    sides: tuple[tuple[Literal["a", "b", "tie"], tuple[str, ...]], ...] = (
        ("a", cfg.a_wins), ("b", cfg.b_wins), ("tie", cfg.ties))
    for name, values in sides:
        if word in {v.strip().lower() for v in values}:
            return name
    raise DataError(file, line, field, f"unknown winner {short_text(value)} (A wins: {', '.join(cfg.a_wins)}; "
                                       f"B wins: {', '.join(cfg.b_wins)}; ties: {', '.join(cfg.ties)}; name yours "
                                       "with --a-wins / --b-wins / --ties)")


def _pair(row: dict[str, Any], fields: dict[str, str], prompt_field: str | None, cfg: PersonalizeConfig,
          file: str, line: int) -> tuple[str, str, str]:
    """(prompt, answer A, answer B) of one row: plain texts, or two transcripts with the same user turns."""
    a_field, b_field = fields["a"], fields["b"]
    if _messages(row[a_field]) is not None:
        turn = _turn_of(row, cfg, file, line)
        users, a = _conversation(row[a_field], turn, file, line, a_field)
        users_b, b = _conversation(row[b_field], turn, file, line, b_field)
        if users != users_b:
            raise DataError(file, line, b_field, f"its user turns differ from {a_field}'s: not two answers to one "
                                                 "prompt")
        if prompt_field is None:
            return "\n\n".join(users), a, b
    else:
        a, b = _text(row[a_field], file, line, a_field), _text(row[b_field], file, line, b_field)
        if prompt_field is None:
            _pick(row, None, PROMPT_FIELDS, "prompt", "--prompt", file, line)  # raises: no prompt field
    assert prompt_field is not None
    if prompt_field not in row:
        raise DataError(file, line, prompt_field, "missing field")
    return _prompt_text(row[prompt_field], file, line, prompt_field), a, b


def read_choices(path: str | Path, cfg: PersonalizeConfig) -> tuple[list[Choice], Counts, dict[str, str], set[str]]:
    """Every non-tie judgment of the file as a Choice, the counts, the field each role was read from, and
    every annotator (those with ties only too).

    A row that does not fit (a missing field, an unknown winner, an empty answer) is a DataError
    naming file, line and field: nothing is guessed or skipped silently.
    """
    file = str(path)
    counts = Counts()
    fields: dict[str, str] = {}
    out: list[Choice] = []
    seen: set[str] = set()
    prompt_field: str | None = None
    for line, row in read_rows(path):
        if not isinstance(row, dict):
            raise DataError(file, line, None, f"a row must be an object with named fields, got {type(row).__name__}")
        if not fields:
            fields["by"] = cfg.by
            fields["a"] = _pick(row, cfg.a, A_FIELDS, "answer A", "--a", file, line)
            fields["b"] = _pick(row, cfg.b, B_FIELDS, "answer B", "--b", file, line)
            fields["winner"] = _pick(row, cfg.winner, WINNER_FIELDS, "winner", "--winner", file, line)
            prompt_field = cfg.prompt or next((f for f in PROMPT_FIELDS if f in row), None)
            fields["prompt"] = prompt_field or f"the user turns of {fields['a']}"
        counts.rows += 1
        for role in ("by", "a", "b", "winner"):
            if fields[role] not in row:
                raise DataError(file, line, fields[role], "missing field")
        person = row[fields["by"]]
        if isinstance(person, bool) or not isinstance(person, (str, int)) or not str(person).strip():
            raise DataError(file, line, fields["by"], f"an annotator id is text or a whole number, got "
                                                      f"{short_text(person)}")
        person = str(person).strip()
        seen.add(person)
        prompt, a, b = _pair(row, fields, prompt_field, cfg, file, line)
        verdict = _winner(row[fields["winner"]], cfg, file, line, fields["winner"])
        if verdict == "tie":
            counts.ties += 1
            continue
        if a == b:
            counts.same_answers += 1
            continue
        order: Any = line
        if cfg.time is not None:
            if cfg.time not in row:
                raise DataError(file, line, cfg.time, "missing field")
            when = row[cfg.time]
            if isinstance(when, bool) or not isinstance(when, (int, float, str)):
                raise DataError(file, line, cfg.time, f"a time is a number or sortable text, got {short_text(when)}")
            order = (isinstance(when, str), when, line)  # numbers before texts: never compared with each other
        category = None
        if cfg.category is not None:
            if not isinstance(row.get(cfg.category), str) or not row[cfg.category].strip():
                raise DataError(file, line, cfg.category, "expected non-empty text")
            category = row[cfg.category]
        chosen, rejected = (a, b) if verdict == "a" else (b, a)
        counts.choices += 1
        out.append(Choice(person, prompt, chosen, rejected, line, order, category))
    if not counts.rows:
        raise DataError(file, None, None, "no rows")
    counts.annotators = len(seen)
    return out, counts, fields, seen


def _profile(choice: Choice, mine: Sequence[Choice], cfg: PersonalizeConfig) -> list[dict[str, str]]:
    """The person's other choices, never one on the judged pair; capped at profile_max (latest or a seeded sample)."""
    others = [c for c in mine if c.key != choice.key]
    if len(others) > cfg.profile_max:
        if cfg.profile_order == "recent":
            others = sorted(others, key=lambda c: c.order)[-cfg.profile_max:]
        else:
            keep = set(random.Random(f"{cfg.seed}:{choice.id}").sample(range(len(others)), cfg.profile_max))
            others = [c for i, c in enumerate(others) if i in keep]
    return [{"id": c.id, "prompt": c.prompt, "chosen": c.chosen, "rejected": c.rejected} for c in others]


def _record(choice: Choice, mine: Sequence[Choice], cfg: PersonalizeConfig, file: str) -> dict[str, Any]:
    """One record in the documented file shape (past choices as `{id, prompt, chosen, rejected}`), validated."""
    row: dict[str, Any] = {"id": choice.id, "user_id": choice.person, "question": choice.prompt,
                           "profile": _profile(choice, mine, cfg), "chosen": choice.chosen,
                           "rejected": choice.rejected}
    if choice.category is not None:
        row["category"] = choice.category
    parse_record(row, Example, file, choice.line)
    return row


def mirrored(test: Sequence[Choice], seed: int) -> tuple[list[tuple[Choice, Choice]], int]:
    """Pairs of test choices on one pair of answers, made the opposite way by two different people.

    Each pair is chosen A-over-B by one person and B-over-A by another, so any scorer that reads
    only the prompt and the answer is right on exactly one of the two. A person's repeated choice
    on one pair counts once; a person who chose it both ways is on neither side. Returns the pairs
    and the number of test choices left unmatched.
    """
    sides: dict[tuple[str, frozenset[str]], dict[str, dict[str, Choice]]] = defaultdict(lambda: defaultdict(dict))
    for c in test:
        sides[c.key][c.chosen].setdefault(c.person, c)
    rng = random.Random(seed)
    pairs: list[tuple[Choice, Choice]] = []
    for key in sorted(sides, key=lambda k: (k[0], sorted(k[1]))):
        one, two = (list(sides[key].get(ans, {}).values()) for ans in sorted(key[1]))
        torn = {c.person for c in one} & {c.person for c in two}  # chose both ways: no side is theirs
        one, two = [c for c in one if c.person not in torn], [c for c in two if c.person not in torn]
        rng.shuffle(one)
        rng.shuffle(two)
        pairs += zip(one, two, strict=False)  # min(len) couples, each of two different people
    return pairs, len(test) - 2 * len(pairs)


def _write_jsonl(records: Sequence[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


OUTPUTS = ("train.jsonl", "test.jsonl", "manifest.json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def personalize(path: str | Path, out: str | Path, cfg: PersonalizeConfig, overwrite: bool = False) -> Manifest:
    """Write DIR/train.jsonl, DIR/test.jsonl (mirrored) and DIR/manifest.json from an annotator-level file."""
    out = Path(out)
    taken = [name for name in OUTPUTS if (out / name).exists()]
    if taken and not overwrite:
        raise PrbenchError(f"{out / taken[0]}: exists (records of an earlier run): choose a new folder or pass "
                           "--overwrite")
    file = str(path)
    choices, counts, fields, seen = read_choices(path, cfg)
    by_person: dict[str, list[Choice]] = defaultdict(list)
    for c in choices:
        by_person[c.person].append(c)
    few = {p for p in seen if len({c.key for c in by_person.get(p, [])}) < cfg.min_choices}
    people = sorted(p for p in by_person if p not in few)
    random.Random(cfg.seed).shuffle(people)
    n_test = round(cfg.test_fraction * len(people))
    if n_test < 2 or len(people) - n_test < 1:
        raise PrbenchError(f"{file}: {len(people)} annotators with at least {cfg.min_choices} choices "
                           f"({len(few)} with fewer left out): too few for a person-disjoint split with a mirrored "
                           "test (it needs two test people and one training person)")
    test_people, train_people = set(people[:n_test]), people[n_test:]
    pairs, unmatched = mirrored([c for p in sorted(test_people) for c in by_person[p]], cfg.seed)
    if not pairs:
        raise PrbenchError(f"{file}: no pair of answers was chosen one way by one test person and the other way by "
                           f"another ({n_test} test people): a mirrored test cannot be built from this file "
                           "(raise --test-fraction, or judge shared pairs by several annotators)")
    train = [_record(c, by_person[p], cfg, file) for p in sorted(train_people) for c in by_person[p]]
    test = [_record(c, by_person[c.person], cfg, file) for pair in pairs for c in pair]
    sizes = sorted(len(r["profile"]) for r in train + test)
    manifest = Manifest(
        source=file, sha256=_sha256(Path(path)), fields=fields, config=cfg,
        counts=counts,
        too_few={"annotators": len(few), "choices": sum(len(by_person.get(p, [])) for p in few)},
        people={"train": len(train_people), "test": len(test_people),
                "test_in_records": len({c.person for pair in pairs for c in pair})},
        records={"train": len(train), "test": len(test)}, test_pairs=len(pairs),
        test_choices_unmirrored=unmatched,
        profile={"min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1]})
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:  # an interrupted earlier run's files never sit beside this run's
        (out / name).unlink(missing_ok=True)
    _write_jsonl(train, out / "train.jsonl")
    _write_jsonl(test, out / "test.jsonl")
    tmp = out / f".manifest.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest.model_dump(mode="json"), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / "manifest.json")
    return manifest
