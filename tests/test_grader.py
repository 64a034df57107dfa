"""Rubric grader: parsing per aspect, invalid grades are NaN (never 0), dedupe and caching."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from prbench.downstream.grader import Grade, RubricGrader, load_grader, parse_grades
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.schema import Example
from prbench.store.cache import Cache
from prbench.testing.records import make_record


class ScriptedEngine(Engine):
    """Replies from a function of the prompt text; counts every prompt it receives."""

    spec = "scripted:grader"

    def __init__(self, reply, fail: bool = False):
        self.reply, self.fail, self.prompts = reply, fail, []

    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        self.prompts.extend(p[-1]["content"] for p in prompts)
        if self.fail:
            return [Generation(text="", finish_reason="error", error="HTTP 503") for _ in prompts]
        return [Generation(text=self.reply(p[-1]["content"])) for p in prompts]


def item(i: int = 0, n_aspects: int = 2) -> Example:
    rec = make_record(i)
    rec["rubric_aspects"] = [{"aspect": f"Aspect number {j}", "reason": f"why {j}", "evidence": "secret span"}
                             for j in range(n_aspects)]
    rec["narrative"] = "NARRATIVE-TEXT the user's own story"
    return Example.model_validate(rec)


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, n, expected", [
    ('{"grades": [{"aspect": 1, "score": 2}, {"aspect": 2, "score": 0}]}', 2, [2, 0]),
    ('Sure!\n```json\n{"grades": [{"aspect": 2, "score": 1}, {"aspect": 1, "score": 2}]}\n```', 2, [2, 1]),
    ('{"1": 2, "2": 1, "3": 0}', 3, [2, 1, 0]),
    ("[1, 1]", 2, [1, 1]),
    ('{"grades": [{"aspect": 1, "score": "2"}, {"aspect": 2, "score": 1.0}]}', 2, [2, 1]),
    ("Aspect 1: 2\nAspect 2 - score 1\n3) 0", 3, [2, 1, 0]),
    ("1. Mentions budget (2 items): score 2\n2. Tone: 0/2", 2, [2, 0]),
])
def test_parse_valid(text: str, n: int, expected: list[int]) -> None:
    assert parse_grades(text, n) == expected


@pytest.mark.parametrize("text, n, expected", [
    ('{"grades": [{"aspect": 1, "score": 2}]}', 2, [2, None]),          # aspect 2 missing
    ('{"grades": [{"aspect": 1, "score": 3}, {"aspect": 2, "score": 1}]}', 2, [None, 1]),  # out of scale
    ('{"grades": [{"aspect": 1, "score": 2}, {"aspect": 1, "score": 0}, {"aspect": 2, "score": 1}]}', 2,
     [None, 1]),                                                          # contradictory duplicate
    ("I think the answer is fine.", 2, [None, None]),
    ('{"grades": [{"aspect": 1, "score": true}, {"aspect": 2, "score": 1}]}', 2, [None, 1]),
])
def test_parse_invalid_aspects_are_none(text: str, n: int, expected: list) -> None:
    assert parse_grades(text, n) == expected


def test_grade_invalid_is_nan_not_zero() -> None:
    g = Grade([2, None])
    assert not g.valid and math.isnan(g.score) and math.isnan(g.normalized)
    ok = Grade([2, 1])
    assert ok.valid and ok.score == 1.5 and ok.normalized == 0.75


# -- the grader -------------------------------------------------------------------------------
def json_reply(scores: list[int]) -> str:
    return json.dumps({"grades": [{"aspect": i + 1, "score": s} for i, s in enumerate(scores)]})


def test_prompt_shows_aspects_not_evidence_or_narrative() -> None:
    eng = ScriptedEngine(lambda p: json_reply([2, 1]))
    grader = RubricGrader(engine=eng)
    [g] = grader.grade([(item(), "An answer.")])
    assert g.score == 1.5
    prompt = eng.prompts[0]
    assert "Aspect number 0" in prompt and "why 1" in prompt and "An answer." in prompt
    assert "secret span" not in prompt and "NARRATIVE-TEXT" not in prompt
    with_narr = RubricGrader(engine=ScriptedEngine(lambda p: json_reply([2, 1])), show_narrative=True)
    assert "NARRATIVE-TEXT" in with_narr.render(item(), "x")
    assert with_narr.key(item(), "x") != grader.key(item(), "x")


def test_unparseable_grade_counted_and_nan() -> None:
    grader = RubricGrader(engine=ScriptedEngine(lambda p: '{"grades": [{"aspect": 1, "score": 2}]}'))
    [g] = grader.grade([(item(), "An answer.")])
    assert math.isnan(g.score) and g.error and g.error.startswith("parse")
    assert grader.stats.parse_failures == 1 and grader.stats.invalid_aspects == 1


def test_dedupe_in_batch_memo_and_persistent_cache(tmp_path) -> None:
    eng = ScriptedEngine(lambda p: json_reply([1, 2]))
    cache = Cache(tmp_path / "c.sqlite", namespace="grades")
    grader = RubricGrader(engine=eng, cache=cache)
    it = item()
    out = grader.grade([(it, "same"), (it, "same"), (it, "other"), (it, "same")])
    assert [g.score for g in out] == [1.5] * 4
    assert len(eng.prompts) == 2 and grader.stats.calls == 2 and grader.stats.deduped == 2
    grader.grade([(it, "same")])  # same grader: memo
    assert len(eng.prompts) == 2
    fresh_engine = ScriptedEngine(lambda p: json_reply([0, 0]))
    fresh = RubricGrader(engine=fresh_engine, cache=cache)
    fresh_engine.spec = eng.spec  # same fingerprint -> served from the persistent cache
    [g] = fresh.grade([(it, "other")])
    assert g.score == 1.5 and fresh_engine.prompts == [] and fresh.stats.cache_hits == 1
    assert fresh.stats.as_dict()["saved"] == 1


def test_engine_errors_not_cached(tmp_path) -> None:
    cache = Cache(tmp_path / "c.sqlite", namespace="grades")
    failing = RubricGrader(engine=ScriptedEngine(lambda p: "", fail=True), cache=cache)
    [g] = failing.grade([(item(), "a")])
    assert not g.valid and g.error.startswith("engine") and failing.stats.engine_errors == 1
    retry = RubricGrader(engine=ScriptedEngine(lambda p: json_reply([2, 2])), cache=cache)
    [g2] = retry.grade([(item(), "a")])
    assert g2.score == 2.0 and retry.stats.calls == 1


def test_cache_key_covers_rubric_and_prompt(tmp_path) -> None:
    grader = RubricGrader(engine=ScriptedEngine(lambda p: json_reply([2, 2])))
    a, b = item(0), item(0, n_aspects=3)
    assert grader.key(a, "x") != grader.key(b, "x")
    custom = tmp_path / "p.txt"
    custom.write_text("{{question}} {{response}} {{aspects}} {{n_aspects}} {{narrative_block}} JSON please")
    other = load_grader(grader.engine, prompt_path=str(custom))
    assert other.key(a, "x") != grader.key(a, "x")


def test_loopback_grader_counts_requests(tmp_path) -> None:
    """Over real HTTP: identical (item, answer) pairs reach the server once; greedy decoding."""
    from prbench.testing.openai_server import serve

    def reply(body: dict) -> str:
        return "Aspect 1: 2\nAspect 2: 1" if "short" in body["messages"][-1]["content"] else json_reply([0, 2])

    with serve(reply) as srv:
        grader = load_grader("openai:grader-model", cache=Cache(tmp_path / "c.sqlite", namespace="grades"),
                             engine_options={"base_url": srv.base_url})
        a, b = item(0), item(1)
        pairs = [(a, "short one"), (b, "short one"), (a, "short one"), (a, "long answer"), (b, "short one")]
        grades = grader.grade(pairs)
        assert [g.score for g in grades] == [1.5, 1.5, 1.5, 1.0, 1.5]
        assert len(srv.requests) == 3  # (a, short), (b, short), (a, long)
        assert {body["temperature"] for body in srv.requests} == {0.0}
        grader.grade(pairs)
        assert len(srv.requests) == 3
        assert grader.run_info()["calls"] == 3 and grader.run_info()["saved"] == 7
