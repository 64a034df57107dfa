"""Planner: aspect parsing, planning over a real HTTP server (resumable, cached), SFT training on CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prbench import evaluate
from prbench.capabilities.plan.driver import plan
from prbench.capabilities.plan.planner import Planner, parse_aspects, planner_sft_rows, render_aspects
from prbench.context.conditions import build_view, read_planner_file
from prbench.context.retrieval import load_retriever
from prbench.schema import RubricAspect, SourceItem
from prbench.store.cache import Cache
from prbench.testing.records import make_records

# -- parsing ----------------------------------------------------------------------------------

NUMBERED = """Here is what this person will expect:

1. Budget focus: they mention money being tight.
2. **Night-shift timing**: they shoot after hospital night shifts.
3. Exact steps - they want written times and temperatures.

Hope this helps!"""


def _titles(text: str, **kw: Any) -> list[str] | None:
    out = parse_aspects(text, **kw)
    return None if out is None else [a.aspect for a in out]


def test_parse_numbered_and_bulleted() -> None:
    out = parse_aspects(NUMBERED)
    assert out is not None
    assert [a.aspect for a in out] == ["Budget focus", "Night-shift timing", "Exact steps"]
    assert out[0].reason == "they mention money being tight."
    assert _titles("- Cheap gear: no money\n* Quiet mornings\n\u2022 Safety: night walks") == [
        "Cheap gear", "Quiet mornings", "Safety"]


def test_parse_json_forms() -> None:
    assert _titles('[{"aspect": "Budget", "reason": "tight"}, {"title": "Timing"}]') == ["Budget", "Timing"]
    assert _titles('Sure!\n```json\n{"aspects": [{"aspect": "A1", "reason": "r"}]}\n```') == ["A1"]
    assert _titles('["Budget", "Timing"]') == ["Budget", "Timing"]


def test_parse_limits_dedupes_and_strips_reasoning() -> None:
    many = "\n".join(f"{i}. Aspect {i}: reason {i}" for i in range(1, 10))
    assert _titles(many) == [f"Aspect {i}" for i in range(1, 7)]
    assert _titles(many, max_aspects=2) == ["Aspect 1", "Aspect 2"]
    assert _titles("1. Budget: a\n2. budget: b\n3. Time: c") == ["Budget", "Time"]
    assert _titles("<think>1. Hidden: no</think>\n1. Shown: yes") == ["Shown"]


@pytest.mark.parametrize("text", ["", "I cannot tell anything about this person.", "<think>1. A: b",
                                  "[]", '{"aspects": []}', "1. :\n2. **", "Title: reason without a number"])
def test_parse_failures_are_none(text: str) -> None:
    assert parse_aspects(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_parse_aspects_never_crashes(text: str) -> None:
    out = parse_aspects(text)
    assert out is None or (1 <= len(out) <= 6 and all(a.aspect.strip() for a in out))


_word = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(_word, min_size=1, max_size=4), st.lists(_word, max_size=6)),
                min_size=1, max_size=6, unique_by=lambda t: " ".join(t[0]).lower()))
def test_render_parse_roundtrip(pairs: list[tuple[list[str], list[str]]]) -> None:
    aspects = [RubricAspect(aspect=" ".join(t), reason=" ".join(r)) for t, r in pairs]
    back = parse_aspects(render_aspects(aspects))
    assert back is not None
    assert [(a.aspect, a.reason) for a in back] == [(a.aspect, a.reason) for a in aspects]


# -- planning over the loopback server -------------------------------------------------------


def _source_file(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(n)), encoding="utf-8")
    return path


def _prompt(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def aspect_reply(body: dict[str, Any]) -> str:
    """A planner that reads the hobby from the posts it was shown."""
    prompt = _prompt(body)
    hobby = next((h for h in ("hiking", "baking", "chess", "poetry") if f"I love {h}" in prompt), None)
    if hobby is None:
        return "I see no posts."
    return f"Thinking about it...\n1. Centres on {hobby}: the posts say so.\n2. Calm pace: they like quiet mornings."


@pytest.fixture()
def key(api_key_env: tuple[str, str]) -> str:
    return api_key_env[0]


def test_plan_end_to_end_and_read_back(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(aspect_reply)
    data = _source_file(tmp_path)
    out = tmp_path / "plans.jsonl"
    res = plan("openai:fake-model", str(data), out, top_k=3, planner_options={"engine_options": {
        "base_url": srv.base_url, "api_key_env": key}})
    assert (res.written, res.skipped, res.failures) == (6, 0, 0)
    plans = read_planner_file(out)
    assert set(plans) == {r["id"] for r in make_records(6)}
    assert [a.aspect for a in plans["ex-001"]] == ["Centres on baking", "Calm pace"]
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["planner"] == "openai:fake-model" and len(rec["prompt_hash"]) == 16 and rec["failed"] is None
    # the planner saw exactly the profile condition's context: top-k posts, never the answer key
    items = [SourceItem.model_validate(r) for r in make_records(6)]
    prompts = {_prompt(b) for b in srv.requests}  # concurrent requests arrive in any order
    assert len(prompts) == 6
    for item in items:
        view = build_view(item, "profile", retriever=load_retriever("bm25"), top_k=3)
        [prompt] = [p for p in prompts if item.question in p]
        assert view.context() in prompt
        assert item.narrative not in prompt and "Budget matters" not in prompt
    # the planner condition runs on the file
    res_eval = evaluate("baseline:lexical", str(data_bench(tmp_path)), "planner", planner_file=str(out), n_boot=20)
    assert res_eval.summary.metrics.n_invalid == 0


def data_bench(tmp_path: Path) -> Path:
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records(6)), encoding="utf-8")
    return path


def test_plan_resumes_and_repairs_half_written_line(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(aspect_reply)
    data = str(_source_file(tmp_path))
    out = tmp_path / "plans.jsonl"
    opts = {"engine_options": {"base_url": srv.base_url, "api_key_env": key}}
    first = plan("openai:fake-model", data, out, limit=3, planner_options=opts)
    assert first.written == 3
    with out.open("a", encoding="utf-8") as fh:
        fh.write('{"id": "ex-003", "asp')  # a crash mid-write
    srv.clear()
    second = plan("openai:fake-model", data, out, planner_options=opts, batch_size=2)
    assert (second.written, second.skipped) == (3, 3)
    assert len(srv.requests) == 3
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"ex-{i:03d}" for i in range(6)]


def test_plan_failures_retry_once_then_record_empty(fake_openai, key: str, tmp_path: Path) -> None:
    def reply(body: dict[str, Any]) -> str:
        if "item 1)" in _prompt(body) and body.get("temperature", 0) > 0:
            return '[{"aspect": "Recovered", "reason": "on retry"}]'
        return "No idea." if "item 0)" in _prompt(body) or "item 1)" in _prompt(body) else aspect_reply(body)

    srv = fake_openai(reply)
    out = tmp_path / "plans.jsonl"
    pl = Planner("openai:fake-model", engine_options={"base_url": srv.base_url, "api_key_env": key})
    res = plan(pl, str(_source_file(tmp_path, 3)), out)
    assert res.failures == 1
    recs = {json.loads(line)["id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert recs["ex-000"]["aspects"] == [] and recs["ex-000"]["failed"] == "parse failure"
    assert recs["ex-000"]["attempts"] == 2 and "No idea" in recs["ex-000"]["raw"]
    assert recs["ex-001"]["aspects"] == [{"aspect": "Recovered", "reason": "on retry"}]
    assert recs["ex-001"]["failed"] is None
    assert len(srv.requests) == 3 + 2
    assert read_planner_file(out)["ex-000"] == []
    info = res.info
    assert info["failures"] == 1 and info["retried"] == 2 and info["recovered_by_retry"] == 1


def test_plan_calls_are_cached(fake_openai, key: str, tmp_path: Path) -> None:
    srv = fake_openai(aspect_reply)
    data = str(_source_file(tmp_path, 3))
    cache = Cache(tmp_path / "cache.sqlite", namespace="planner")
    opts = {"engine_options": {"base_url": srv.base_url, "api_key_env": key}}
    plan("openai:fake-model", data, tmp_path / "a.jsonl", cache=cache, planner_options=opts)
    n = len(srv.requests)
    res = plan("openai:fake-model", data, tmp_path / "b.jsonl", cache=cache, planner_options=opts)
    assert len(srv.requests) == n and res.info["cache_hits"] == 3
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_plan_cli(fake_openai, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.capabilities.plan.command import app

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    srv = fake_openai(aspect_reply)
    out = tmp_path / "cli.jsonl"
    runner = CliRunner()
    result = runner.invoke(app, ["--planner", "openai:fake-model", "--data", str(_source_file(tmp_path, 2)),
                                 "--out", str(out), "--base-url", srv.base_url, "--api-key-env", key,
                                 "--top-k", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["written"] == 2
    assert len(read_planner_file(out)) == 2
    missing = runner.invoke(app, ["--data", "sample"])
    assert missing.exit_code != 0
    helped = runner.invoke(app, ["train", "--help"])
    assert helped.exit_code == 0 and "--base-model" in helped.output


# -- training a planner ------------------------------------------------------------------------


def test_sft_rows_use_true_rubric_as_target() -> None:
    items = [SourceItem.model_validate(r) for r in make_records(3)]
    rows = planner_sft_rows(items, top_k=2)
    assert len(rows) == 3
    assert rows[0]["completion"][0]["content"] == "1. Centres on hiking: The user loves hiking.\n2. Low cost: Budget matters."
    assert "Earlier posts by this user" in rows[0]["prompt"][0]["content"]
    assert items[0].narrative not in rows[0]["prompt"][0]["content"]


def test_train_planner_tiny_cpu(tiny_lm: Path, tmp_path: Path) -> None:
    from prbench.capabilities.plan.planner import train_planner
    from prbench.engines.transformers_engine import TransformersEngine

    items = [SourceItem.model_validate(r) for r in make_records(8)]
    out = tmp_path / "planner"
    facts = train_planner(str(tiny_lm), items, out, steps=3, lora=True, top_k=2, batch_size=2, max_length=1024,
                          learning_rate=1e-3)
    assert facts["train_items"] == 8 and facts["steps"] == 3
    assert facts["first_loss"] is not None and facts["final_loss"] is not None
    assert (out / "config.json").is_file() and (out / "prbench_planner.json").is_file()
    assert not (out / "adapter_config.json").exists()  # merged: a plain HF folder
    engine = TransformersEngine(str(out), device="cpu")
    pl = Planner(engine, max_new_tokens=8)
    view = build_view(items[0], "profile", retriever=load_retriever("bm25"), top_k=2)
    [outcome] = pl.plan_views([view], [0])
    assert outcome.id == items[0].id and outcome.attempts >= 1  # a 3-step random model may still fail to parse
