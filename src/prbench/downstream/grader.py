"""Rubric grader: an LLM grades one answer against the asking user's own rubric aspects.

Per aspect: 0 = not covered, 1 = partly, 2 = well (the paper's scale). The item score is the
mean over aspects (0-2) and, for convenience, that mean / 2 (0-1). The grader sees the
question, each aspect's title and reason and the answer; the user's narrative only when
`show_narrative=True` (off by default: the aspects are its distilled form, and the narrative
invites grading on style). The evidence spans are never shown (they are narrative quotes).

Parsing asks for JSON (`{"grades": [{"aspect": 1, "score": 2}, ...]}`) and falls back to
one line per aspect ("1: 2", "Aspect 2 - score 1"). An aspect that cannot be read makes the
whole grade invalid: value NaN and counted (`parse_failures`), never 0.

Every grade is cached by a content hash of (grader fingerprint, question, response, rubric,
narrative when shown, prompt hash): an identical answer is graded once, whichever RM picked
it and at whichever k. `stats()` reports calls made versus requests saved. Engine errors
(network, server) are not cached, so a re-run retries them; parse failures are cached (the
grader's output is deterministic at temperature 0, so asking again would not help).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from prbench.engines.base import Engine, GenParams, load_engine
from prbench.errors import SpecError
from prbench.prompts import Prompt, load_prompt
from prbench.registry import ENGINES, GRADERS
from prbench.schema import SourceItem
from prbench.store.cache import Cache, NullCache, content_key

PARSER_VERSION = 1
SCALE_MAX = 2


@dataclass
class Grade:
    """One graded answer. `aspects[i]` is 0/1/2 or None when aspect i could not be read."""

    aspects: list[int | None]
    raw: str = ""
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None and bool(self.aspects) and all(a is not None for a in self.aspects)

    @property
    def score(self) -> float:
        """Mean aspect grade on the 0-2 scale; NaN when invalid."""
        grades = [a for a in self.aspects if a is not None]
        if not self.valid:
            return math.nan
        return sum(grades) / len(grades)

    @property
    def normalized(self) -> float:
        """The same on 0-1."""
        return self.score / SCALE_MAX

    def to_json(self) -> dict[str, Any]:
        return {"aspects": self.aspects, "raw": self.raw, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grade:
        return cls(aspects=list(data["aspects"]), raw=data.get("raw", ""), error=data.get("error"))


@runtime_checkable
class Grader(Protocol):
    """What Best-of-N, RL and RGD need of a grader; any object with these works where a spec does."""

    spec: str
    stats: Any

    def grade(self, pairs: Sequence[tuple[SourceItem, str]]) -> list[Grade]: ...

    def key(self, item: SourceItem, response: str) -> str: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def run_info(self) -> dict[str, Any]: ...


@dataclass
class GraderStats:
    """How much grading the cache saved: `requested` = `calls` + `cache_hits` + `deduped`."""

    requested: int = 0
    calls: int = 0
    cache_hits: int = 0
    deduped: int = 0
    engine_errors: int = 0
    parse_failures: int = 0
    invalid_aspects: int = 0

    @property
    def saved(self) -> int:
        return self.requested - self.calls

    def as_dict(self) -> dict[str, int]:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "saved": self.saved}


# -- parsing ----------------------------------------------------------------------------------
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_LINE = re.compile(r"^\s*[-*#>\s]*(?:aspect|item)?\s*#?\s*(\d+)\s*[:.)\]=\-–—]\s*(.*)$", re.IGNORECASE)
_SCORE_WORD = re.compile(r"(?:score|grade|rating)\s*[:=]?\s*([0-9](?:\.0+)?)\b", re.IGNORECASE)
_OUT_OF = re.compile(r"(?<![\d.])([0-9])\s*/\s*2(?![\d.])")  # "1/2": a score out of 2
_LONE_DIGIT = re.compile(r"(?<![\d./])([0-9])(?:\.0+)?(?![\d/])")


def _as_grade(value: Any) -> int | None:
    """0, 1 or 2 (ints, integral floats, digit strings); anything else is unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9](?:\.0+)?\s*", value):
        value = float(value)
    if isinstance(value, (int, float)) and float(value).is_integer() and 0 <= value <= SCALE_MAX:
        return int(value)
    return None


def _index(key: Any) -> int | None:
    """A 1-based aspect number written as up to six ASCII digits, else None (no '\u00b2', no 5000-digit runs)."""
    text = str(key).strip()
    return int(text) if re.fullmatch(r"[0-9]{1,6}", text) else None


def _json_candidates(text: str) -> list[Any]:
    blobs = [m.group(1) for m in _FENCE.finditer(text)]
    for open_c, close_c in (("{", "}"), ("[", "]")):
        start, end = text.find(open_c), text.rfind(close_c)
        if 0 <= start < end:
            blobs.append(text[start : end + 1])
    out = []
    for blob in blobs:
        try:
            out.append(json.loads(blob))
        except (ValueError, RecursionError):  # JSONDecodeError, huge integers, deep nesting
            continue
    return out


def _from_json(obj: Any, n: int) -> list[int | None] | None:
    """Aspect grades from a parsed JSON reply, or None when its shape is not one we know."""
    if isinstance(obj, dict):
        for key in ("grades", "scores", "aspects", "results"):
            if key in obj:
                return _from_json(obj[key], n)
        keyed = {i: v for k, v in obj.items() if (i := _index(k)) is not None}
        if keyed:
            out: list[int | None] = [None] * n
            for k, v in keyed.items():
                i = k - 1
                if 0 <= i < n:
                    out[i] = _as_grade(v.get("score") if isinstance(v, dict) else v)
            return out
        return None
    if isinstance(obj, list):
        if all(not isinstance(e, (dict, list)) for e in obj):  # a bare list of scores, in order
            vals = [_as_grade(e) for e in obj]
            return vals + [None] * (n - len(vals)) if len(vals) <= n else None
        out = [None] * n
        seen: set[int] = set()
        for pos, entry in enumerate(obj):
            if not isinstance(entry, dict):
                return None
            idx = entry.get("aspect", entry.get("id", entry.get("index", pos + 1)))
            if isinstance(idx, bool) or not isinstance(idx, int):
                parsed = _index(idx) if isinstance(idx, str) else None
                idx = pos + 1 if parsed is None else parsed
            i = idx - 1
            if not 0 <= i < n:
                continue
            value = _as_grade(entry.get("score", entry.get("grade")))
            if i in seen and out[i] != value:
                value = None  # the same aspect graded twice, differently: unreadable
            seen.add(i)
            out[i] = value
        return out
    return None


def _from_lines(text: str, n: int) -> list[int | None]:
    out: list[int | None] = [None] * n
    seen: dict[int, int | None] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        idx, rest = _index(m.group(1)), m.group(2)
        if idx is None:
            continue
        i = idx - 1
        if not 0 <= i < n:
            continue
        word = _SCORE_WORD.search(rest) or _OUT_OF.search(rest)
        if word:
            value = _as_grade(word.group(1))
        else:
            digits = _LONE_DIGIT.findall(rest)
            value = _as_grade(digits[-1]) if digits else None
        if value is None:
            continue
        if i in seen and seen[i] != value:
            seen[i] = None
        else:
            seen[i] = value
    for i, v in seen.items():
        out[i] = v
    return out


def parse_grades(text: str, n_aspects: int) -> list[int | None]:
    """Per-aspect grades from the grader's reply: JSON first, then one line per aspect."""
    best: list[int | None] = [None] * n_aspects
    for obj in _json_candidates(text):
        got = _from_json(obj, n_aspects)
        if got is not None and sum(v is not None for v in got) > sum(v is not None for v in best):
            best = got
    if all(v is not None for v in best):
        return best
    lines = _from_lines(text, n_aspects)
    return lines if sum(v is not None for v in lines) > sum(v is not None for v in best) else best


# -- the grader ---------------------------------------------------------------------------------
def format_aspects(item: SourceItem) -> str:
    """Numbered aspect titles with their reasons (no evidence spans)."""
    lines = []
    for i, a in enumerate(item.rubric_aspects, 1):
        lines.append(f"{i}. {a.aspect}" + (f" (why it matters to them: {a.reason})" if a.reason else ""))
    return "\n".join(lines)


@dataclass
class RubricGrader:
    """Grades (item, response) pairs with an LLM engine; deduplicated and cached by content."""

    engine: Engine
    spec: str = ""
    cache: Cache = field(default_factory=NullCache)
    prompt: Prompt = field(default_factory=lambda: load_prompt("grade_rubric"))
    show_narrative: bool = False
    max_new_tokens: int = 512
    batch_size: int = 16
    stats: GraderStats = field(default_factory=GraderStats)

    def __post_init__(self) -> None:
        self.spec = self.spec or getattr(self.engine, "spec", "engine")
        self._memo: dict[str, Grade] = {}

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes a grade: engine, decoding, prompt text, narrative flag, parser."""
        return {"engine": self.engine.fingerprint(), "max_new_tokens": self.max_new_tokens, "temperature": 0.0,
                "prompt": self.prompt.hash, "narrative": self.show_narrative, "parser": PARSER_VERSION}

    def key(self, item: SourceItem, response: str) -> str:
        rubric = [(a.aspect, a.reason) for a in item.rubric_aspects]
        narrative = item.narrative if self.show_narrative else None
        return content_key("grade", self.fingerprint(), item.question, response, rubric, narrative, self.prompt.hash)

    def render(self, item: SourceItem, response: str) -> str:
        narrative = (f"\nIn their own words, what they are after:\n{item.narrative}\n"
                     if self.show_narrative and item.narrative else "")
        return self.prompt.render(question=item.question, narrative_block=narrative,
                                  n_aspects=str(len(item.rubric_aspects)), aspects=format_aspects(item),
                                  response=response)

    def grade(self, pairs: Sequence[tuple[SourceItem, str]]) -> list[Grade]:
        """A grade per (item, response), in order. Each distinct key reaches the engine at most once."""
        keys = [self.key(it, r) for it, r in pairs]
        self.stats.requested += len(keys)
        out: dict[str, Grade] = {}
        todo: dict[str, tuple[SourceItem, str]] = {}
        for k, pair in zip(keys, pairs):
            if k in out or k in todo:
                self.stats.deduped += 1
            elif k in self._memo:
                out[k] = self._memo[k]
                self.stats.deduped += 1
            else:
                todo[k] = pair
        hits = self.cache.get_many(list(todo))
        for k, data in hits.items():
            out[k] = self._memo[k] = Grade.from_json(data)
            del todo[k]
            self.stats.cache_hits += 1
        items = list(todo.items())
        for start in range(0, len(items), max(1, self.batch_size)):
            chunk = items[start : start + self.batch_size]
            fresh = self._call([p for _, p in chunk], [k for k, _ in chunk])
            store = {}
            for (k, _), g in zip(chunk, fresh):
                out[k] = g
                if g.error is None or g.error.startswith("parse"):  # engine failures are neither kept nor cached
                    store[k] = g.to_json()
                    self._memo[k] = g
            self.cache.put_many(store)
        return [out[k] for k in keys]

    def _call(self, pairs: Sequence[tuple[SourceItem, str]], keys: Sequence[str]) -> list[Grade]:
        prompts = [[{"role": "user", "content": self.render(it, r)}] for it, r in pairs]
        params = [GenParams(max_new_tokens=self.max_new_tokens, temperature=0.0, seed=int(k[:8], 16))
                  for k in keys]
        self.stats.calls += len(prompts)
        gens = self.engine.generate(prompts, params)
        grades = []
        for (item, _), gen in zip(pairs, gens):
            if gen.error:
                self.stats.engine_errors += 1
                grades.append(Grade([None] * len(item.rubric_aspects), raw=gen.text or "", error=f"engine: {gen.error}"))
                continue
            n = len(item.rubric_aspects)
            if n == 0:
                grades.append(Grade([], raw=gen.text, error="parse: item has no rubric aspects"))
                self.stats.parse_failures += 1
                continue
            aspects = parse_grades(gen.text, n)
            missing = sum(a is None for a in aspects)
            error = None
            if missing:
                self.stats.parse_failures += 1
                self.stats.invalid_aspects += missing
                error = f"parse: {missing} of {n} aspect grades unreadable"
            grades.append(Grade(aspects, raw=gen.text, error=error))
        return grades

    def run_info(self) -> dict[str, Any]:
        return {"grader": self.spec, "prompt_hash": self.prompt.hash, "narrative": self.show_narrative,
                **self.stats.as_dict()}


def load_grader(
    spec: Any,
    *,
    cache: Cache | None = None,
    show_narrative: bool = False,
    prompt_path: str | None = None,
    max_new_tokens: int = 512,
    batch_size: int = 16,
    engine_options: dict[str, Any] | None = None,
) -> Grader:
    """A grader from a spec, an engine, or a ready grader object (returned as it is).

    A spec whose prefix is a registered grader (`embedding:<encoder>`, `prbench.graders`
    plug-ins) builds that grader; any engine spec (`openai:...`, `hf:DIR`, `vllm:...`) gives the
    LLM rubric grader over that engine.
    """
    if isinstance(spec, Grader):
        return spec
    if isinstance(spec, str):
        prefix = spec.partition(":")[0]
        if prefix in GRADERS:
            return GRADERS.build(spec)
        if prefix not in ENGINES:
            raise SpecError(GRADERS.unknown(prefix, extra=ENGINES.names()))
    engine = spec if isinstance(spec, Engine) else load_engine(spec, **(engine_options or {}))
    return RubricGrader(engine=engine, spec=spec if isinstance(spec, str) else engine.spec,
                        cache=cache if cache is not None else NullCache(),
                        prompt=load_prompt("grade_rubric", prompt_path), show_narrative=show_narrative,
                        max_new_tokens=max_new_tokens, batch_size=batch_size)
