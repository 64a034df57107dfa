"""Score each answer on four 1-5 scales with the validator engine, and read the scores back robustly.

The validator is asked for a JSON object; the parser accepts the first JSON object anywhere in
the reply that names all four scales (also inside code fences or after some prose), else
'name: value' lines. A reply that yields no complete, in-range set of scores is a parse failure:
it is retried once with a reminder and a derived seed, and if that fails too the item is dropped
("validation parse failure"). Scores are never defaulted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from prbench.build.calls import CachedEngine
from prbench.build.generate import format_aspects
from prbench.engines.base import GenParams, Messages
from prbench.evaluation.scoring import example_seed
from prbench.prompts import Prompt, load_prompt
from prbench.schema import SourceItem

SCALES = ("factuality", "relevance", "helpfulness", "rubric_fit")
GENERAL_SCALES = SCALES[:3]
# Spellings a validator may use for each scale (normalised: lower case, spaces/hyphens -> '_').
_ALIASES = {
    "factuality": "factuality", "factual_accuracy": "factuality", "accuracy": "factuality",
    "relevance": "relevance", "instruction_following": "relevance", "relevance_instruction_following": "relevance",
    "helpfulness": "helpfulness", "harmlessness": "helpfulness", "helpfulness_harmlessness": "helpfulness",
    "rubric_fit": "rubric_fit", "rubric": "rubric_fit", "personal_fit": "rubric_fit", "fit": "rubric_fit",
    "rubricfit": "rubric_fit",
}
_LINE = re.compile(
    r"^[\s*\-#>`\"']*([A-Za-z][A-Za-z _/&-]*?)[\s*`\"']*[:=]\s*[*`\"']*\s*(\d+(?:\.\d+)?)(?:\s*/\s*5)?\b",
    re.MULTILINE,
)
RETRY_REMINDER = ("\n\nYour previous reply could not be read. Reply with the JSON object only, with the four "
                  "keys factuality, relevance, helpfulness and rubric_fit, each an integer from 1 to 5.")


def _scale_name(key: str) -> str | None:
    norm = re.sub(r"[\s/&-]+", "_", key.strip().lower()).strip("_")
    norm = re.sub(r"_+", "_", norm)
    return _ALIASES.get(norm)


def _score_value(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*5)?\s*", value)
        value = float(m.group(1)) if m else None
    if isinstance(value, (int, float)) and 1 <= value <= 5:
        return int(value) if float(value).is_integer() else float(value)
    return None


def _from_mapping(obj: dict) -> dict[str, float] | None:
    out: dict[str, float] = {}
    for k, v in obj.items():
        name = _scale_name(str(k))
        if isinstance(v, dict):  # {"factuality": {"score": 4, "reason": ...}}
            v = v.get("score", v.get("rating"))
        val = _score_value(v)
        if name and val is not None and name not in out:
            out[name] = val
    return out if set(out) == set(SCALES) else None


def _json_objects(text: str):
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except (ValueError, RecursionError):  # JSONDecodeError, huge integers, deep nesting
            continue
        if isinstance(obj, dict):
            yield obj
            for v in obj.values():  # {"scores": {...}}
                if isinstance(v, dict):
                    yield v


def parse_scores(text: str) -> dict[str, float] | None:
    """The four scores in a validator reply, or None when they cannot all be read."""
    # Python-style dicts ({'factuality': 4}) are common from small models: retry with double quotes.
    for candidate in (text, text.replace("'", '"')):
        for obj in _json_objects(candidate):
            got = _from_mapping(obj)
            if got:
                return got
    found: dict[str, float] = {}
    for m in _LINE.finditer(text):
        name, val = _scale_name(m.group(1)), _score_value(m.group(2))
        if name and val is not None and name not in found:
            found[name] = val
    return found if set(found) == set(SCALES) else None


@dataclass
class Validation:
    """The scores of one answer (None after two unreadable replies) and the raw replies."""

    scores: dict[str, float] | None = None
    attempts: int = 0
    parse_failures: int = 0
    error: str | None = None
    raw: list[str] = field(default_factory=list)


def validation_messages(prompt: Prompt, item: SourceItem, response: str, reminder: str = "") -> Messages:
    """One user turn: question, the user's expected aspects, the answer, and the four scales."""
    text = prompt.render(question=item.question, aspects=format_aspects(item.rubric_aspects), response=response,
                         reminder=reminder)
    return [{"role": "user", "content": text}]


def validate_answers(
    engine: CachedEngine,
    jobs: Sequence[tuple[SourceItem, str, str]],
    *,
    seed: int,
    params: GenParams,
    prompt: Prompt | None = None,
) -> list[Validation]:
    """Scores for each (item, role, answer text); unreadable replies get one retry, then None."""
    prompt = prompt or load_prompt("build_validate")
    results = [Validation() for _ in jobs]
    pending = list(range(len(jobs)))
    for attempt in (1, 2):
        if not pending:
            break
        reminder = RETRY_REMINDER if attempt == 2 else ""
        purpose = "validate-{role}" + ("-retry" if attempt == 2 else "")
        msgs = [validation_messages(prompt, jobs[j][0], jobs[j][2], reminder) for j in pending]
        plist = [replace(params, seed=example_seed(seed, jobs[j][0].id, purpose.format(role=jobs[j][1])))
                 for j in pending]
        still: list[int] = []
        for j, g in zip(pending, engine.generate(msgs, plist)):
            res = results[j]
            res.attempts = attempt
            res.raw.append(g.text)
            scores = None if g.error else parse_scores(g.text)
            if scores is None:
                res.parse_failures += 1
                res.error = f"validator error: {g.error}" if g.error else "unparseable validator reply"
                still.append(j)
            else:
                res.scores, res.error = scores, None
        pending = still
    return results
