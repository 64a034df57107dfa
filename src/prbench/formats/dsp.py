"""`dsp`: Domain-Specific Preference (Everyone Deserves A Reward), and its text-score pair files.

Source: github.com/Linear95/DSP README and `reward_datasets.py`
(`convert_domain_specific_reward_data`). Two shapes:
- domain items (`data/domain_specific_preference.{train,test}.json`): `query` and
  `responses` {academy, business, entertainment, literature, normal}. For each of the four
  domains the user is that domain's persona: chosen = the domain's response, rejected = each
  other response (the other three domains and `normal`), as the converter's `--to_pairs`
  does: 4 pairs per domain, 16 per query. `dsp:academy` keeps one domain.
- text-score pairs (`data/*.json` converted, e.g. `helpful.test.json`): `text` (two
  transcripts, "\\n\\nHuman:" or "## Human:" turns) and `score` (two finite numbers: NaN or
  infinity is a located error); the higher score is chosen. Equal scores are no preference:
  left out and counted in a warning, as DSP's `compute_metrics` leaves them out
  (github.com/Linear95/DSP at ec099cf, `trainer.py` L17-36: only pairs with one score larger
  count; 245 of 901 rows of webgpt.test.json). No persona: general preference data. As in
  `hh-rlhf`, transcripts that differ before the last assistant turn or end in an empty one
  are errors; `dsp:skip` leaves them out, counted (13 of 2,352 in helpful.test.json). DSP
  itself scores whole transcripts and so keeps those rows; prbench judges the last answer
  alone, so it cannot (a deliberate difference, docs/formats.md).
  Accuracy is DSP's "Preference total Acc": compute_metrics counts each pair in both
  orientations, so an RM score tie earns one of two, which is prbench's 0.5.
Licence: the DSP data is CC BY-NC 4.0 (its DATA_LICENSE); helpful/harmless derive from HH-RLHF (MIT).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import Reader, Skips, build, parse_transcript, row_id, rows, stem, text
from prbench.formats.hh import pair_from_transcripts
from prbench.schema import Example

DOMAINS = ("academy", "business", "entertainment", "literature")
OTHERS = ("normal",)
# One line per domain persona, in prbench's words (the paper's system prompts ask ChatGPT to
# answer as an assistant for that application domain).
PERSONAS = {
    "academy": "I read answers as an academic: I want rigorous, precise, well-sourced explanations.",
    "business": "I read answers as a business professional: I want practical, goal-oriented, concise advice.",
    "entertainment": "I read answers for fun: I want lively, engaging and entertaining replies.",
    "literature": "I read answers as a lover of literature and art: I want expressive, imaginative, well-crafted prose.",
}


class DSP(Reader):
    name = "dsp"
    source = "github.com/Linear95/DSP (README, reward_datasets.py); data CC BY-NC 4.0"
    fields = "query, responses{academy, business, entertainment, literature, normal} | text[2], score[2]"
    headline = ("DSP's 'Preference total Acc' (trainer.py compute_metrics): each pair in both orientations, so an "
                "RM tie is 0.5, which is prbench's accuracy; label ties left out, counted")
    priority = 25
    shapes = (("query", "responses"), ("text", "score"))
    syntax = "dsp[:DOMAIN,...][:skip]"

    def __init__(self, rest: str = "", **options: Any):
        super().__init__(rest, **options)
        opts = [d for d in rest.replace(":", ",").split(",") if d]
        self.skip = "skip" in opts
        self.domains = tuple(d for d in opts if d != "skip") or DOMAINS
        bad = [d for d in self.domains if d not in DOMAINS]
        if bad:
            raise SpecError(f"dsp: unknown domain {bad[0]!r} (use {', '.join(DOMAINS)})")

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return ("query" in row and isinstance(row.get("responses"), dict)) or (
            isinstance(row.get("text"), list) and isinstance(row.get("score"), list))

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        skips = Skips(self.skip)
        for file, line, row in rows(src, split):
            if "text" in row and "query" not in row:
                scores = skips.keep(_label_scores, row, file, line)
                if scores is not None and scores[0] == scores[1]:
                    skips.drop("equal label scores (no preference: DSP's compute_metrics leaves them out)", file, line)
                elif scores is not None and (rec := skips.keep(self._text_score, row, scores, file, line,
                                                                        row_id(src, file, line))):
                    yield file, line, rec
                continue
            query = text(row, "query", file, line)
            responses = row.get("responses")
            if not isinstance(responses, dict):
                raise DataError(file, line, "responses", "must map each domain to its response")
            for name in (*DOMAINS, *OTHERS):
                text(responses, name, file, line, field=f"responses.{name}")
            for domain in self.domains:
                for other in (*DOMAINS, *OTHERS):
                    if other == domain:
                        continue
                    yield file, line, build(
                        Example, file, line, id=f"{row_id(src, file, line)}:{domain}>{other}", question=query,
                        chosen=responses[domain], rejected=responses[other], category=domain, user_id=domain,
                        persona=PERSONAS[domain], profile=[], rubric_aspects=[])
        skips.report(self.name, src)

    @staticmethod
    def _text_score(row: Mapping[str, Any], scores: list[float], file: str, line: int,
                    default_id: str) -> Example:
        texts = row["text"]
        if not isinstance(texts, list) or len(texts) != 2 or not all(isinstance(t, str) for t in texts):
            raise DataError(file, line, "text", "must hold two transcripts")
        hi, lo = (0, 1) if scores[0] > scores[1] else (1, 0)
        chosen = parse_transcript(texts[hi], file, line, f"text[{hi}]")
        rejected = parse_transcript(texts[lo], file, line, f"text[{lo}]")
        return pair_from_transcripts(chosen, rejected, file, line, row.get("id"), default_id, stem(file))


def _label_scores(row: Mapping[str, Any], file: str, line: int) -> list[float]:
    """The two label scores, finite numbers (a NaN would compare false both ways and pick text[1])."""
    scores = row.get("score")
    if not isinstance(scores, list) or len(scores) != 2 or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores):
        raise DataError(file, line, "score", "must hold two numbers")
    for i, value in enumerate(scores):
        if not math.isfinite(value):
            raise DataError(file, line, f"score[{i}]", f"must be a finite number (got {value})")
    return [float(s) for s in scores]
