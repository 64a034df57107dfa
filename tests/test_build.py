"""Benchmark construction: generate, validate, filter, export, report, resume, human round trip.

The scripted world: items come from `make_records(12)` (chosen/rejected dropped). A scripted
generator writes answers that contain or avoid the two rubric aspects ("Centres on <topic>",
"Low cost"); a scripted validator scores an answer from its text (rubric_fit 5 / 3 / 1 when it
names both / one / none of <topic> and "cheap"; marker words lower other scales). Each item is
given one situation, so every filter decision and every report number is known by hand:

item  category   situation                                           outcome
0     Arts       plain; validator wraps JSON in a code fence          kept
1     Lifestyle  plain                                               kept
2     Society    rejected says "cheap" (fit 3)                       rejected rubric fit too high
3     Arts       chosen lacks "cheap" (fit 3)                        chosen rubric fit too low
4     Lifestyle  rejected says "reportedly" (factuality 3)           factuality gap too large
5     Society    chosen 120 words, retry is short                    kept (chosen regenerated)
6     Arts       both 120 words twice                                kept (both regenerated + truncated to 100)
7     Lifestyle  chosen 30 words vs rejected 14                      length ratio too large
8     Society    validator unreadable twice on rejected               validation parse failure
9     Arts       validator unreadable once on chosen; "briefly"      kept (one retry; chosen relevance 4)
10    Lifestyle  validator answers in "Name: 5" lines                kept
11    Society    rejected "cheap" and "risky" (fit 3, helpful 3)     rejected rubric fit too high (+ helpfulness gap)
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from prbench.build import BuildConfig, FilterRule, build_benchmark
from prbench.build.annotate import agreement, cohen_kappa, export_annotation, score_bin
from prbench.build.filter import decide, failed_checks
from prbench.build.generate import count_words, truncate_words
from prbench.build.validate import parse_scores
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.errors import PrbenchError
from prbench.store.cache import NullCache
from prbench.store.records import BuildSummary
from prbench.testing.records import make_records

_USER_CACHE = os.environ.get("PRBENCH_CACHE_DIR")
TOPICS = ["hiking", "baking", "chess", "poetry"]
CHOSEN = "Spend a cheap and relaxed Saturday on {t}, then rest at home on Sunday."  # 14 words
REJECTED = "Book a guided city tour on Saturday and enjoy a long brunch on Sunday."  # 14 words
LONG_CHOSEN = " ".join(["Keep it cheap and go {t} on a quiet day."] * 12)  # 12 sentences x 10 words
LONG_REJECTED = " ".join(["Book a guided tour and a long brunch in town."] * 12)
SPECIAL_CHOSEN = {
    3: "Spend a relaxed Saturday on {t}, then rest at home on a quiet Sunday.",  # no "cheap"
    7: CHOSEN + " Bring a flask of tea, a warm jumper, and a small notebook for ideas and notes.",  # 30 words
    9: "Spend a cheap and relaxed Saturday on {t}, then briefly rest on Sunday.",  # 13 words
}
SPECIAL_REJECTED = {
    2: "Book a cheap guided city tour on Saturday and a long brunch on Sunday.",
    4: "Book a guided city tour on Saturday, reportedly free, and brunch on Sunday.",
    11: "Book a cheap and risky night climb on Saturday and a long brunch on Sunday.",
}


def _item(text: str) -> int:
    return int(re.search(r"\(item (\d+)\)", text).group(1))


def scripted_reply(messages: Messages) -> str:
    """The scripted generator and validator: deterministic, computed from the request alone."""
    text = messages[-1]["content"]
    i = _item(text)
    t = TOPICS[i % 4]
    retry = "previous draft had" in text
    if "What THIS PERSON EXPECTS" in text:  # chosen
        if i == 6 or (i == 5 and not retry):
            return LONG_CHOSEN.format(t=t)
        return SPECIAL_CHOSEN.get(i, CHOSEN).format(t=t)
    if "does NOT want" in text:  # rejected
        return LONG_REJECTED if i == 6 else SPECIAL_REJECTED.get(i, REJECTED)
    assert "Rate the answer on four separate scales" in text
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0].lower()
    topic = re.search(r"Centres on (\w+)", text).group(1)
    is_chosen = topic in answer
    reminded = "could not be read" in text
    if i == 8 and not is_chosen:
        return "I cannot rate this answer."
    if i == 9 and is_chosen and not reminded:
        return "Sure! Let me think about it first."
    hits = (topic in answer) + ("cheap" in answer)
    s = {"factuality": 3 if "reportedly" in answer else 5, "relevance": 4 if "briefly" in answer else 5,
         "helpfulness": 3 if "risky" in answer else 5, "rubric_fit": {0: 1, 1: 3, 2: 5}[hits]}
    if i == 10:
        return "Here is my rating.\n" + "\n".join(f"{k.replace('_', ' ').title()}: {v}" for k, v in s.items())
    if i == 0:
        return f"Scores below.\n```json\n{json.dumps(s)}\n```"
    return json.dumps(s)


def role_of(messages: Messages) -> str:
    text = messages[-1]["content"]
    if "What THIS PERSON EXPECTS" in text:
        return "chosen"
    return "rejected" if "does NOT want" in text else "validate"


class ScriptedEngine(Engine):
    """An in-process engine over `scripted_reply` that logs every request it receives."""

    def __init__(self, spec: str = "fake:scripted"):
        self.spec = spec
        self.log: list[tuple[int, str]] = []

    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        out = []
        for m in prompts:
            self.log.append((_item(m[-1]["content"]), role_of(m)))
            out.append(Generation(scripted_reply(m)))
        return out


def write_source(path: Path, n: int = 12) -> Path:
    rows = []
    for r in make_records(n):
        r.pop("chosen"), r.pop("rejected")
        rows.append(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    return write_source(tmp_path / "source.jsonl")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))


def config(source: Path, **kw) -> BuildConfig:
    return BuildConfig(source=str(source), generator="fake:gen", validator="fake:val", top_k=3, batch_size=4, **kw)


KEPT = {"ex-000", "ex-001", "ex-005", "ex-006", "ex-009", "ex-010"}
FIRST_REASONS = {"ex-002": "rejected rubric fit too high", "ex-003": "chosen rubric fit too low",
                 "ex-004": "factuality gap too large", "ex-007": "length ratio too large",
                 "ex-008": "validation parse failure", "ex-011": "rejected rubric fit too high"}


# -- units ----------------------------------------------------------------------------------
def test_parse_scores_forms() -> None:
    want = {"factuality": 4, "relevance": 5, "helpfulness": 3, "rubric_fit": 2}
    assert parse_scores('{"factuality": 4, "relevance": 5, "helpfulness": 3, "rubric_fit": 2}') == want
    assert parse_scores('Sure.\n```json\n{"Factuality": "4", "Relevance": 5, "Helpfulness": 3, '
                        '"Rubric fit": 2}\n```\nDone.') == want
    assert parse_scores('{"scores": {"factuality": 4, "relevance": 5, "helpfulness": 3, "rubric_fit": 2}}') == want
    assert parse_scores("factuality: 4\n- **Relevance**: 5/5\nHelpfulness = 3\nRubric fit: 2") == want
    assert parse_scores("{'factuality': 4, 'relevance': 5, 'helpfulness': 3, 'rubric_fit': 2}") == want
    assert parse_scores("factuality: 4\nrelevance: 5\nhelpfulness: 3") is None  # incomplete: never defaulted
    assert parse_scores('{"factuality": 9, "relevance": 5, "helpfulness": 3, "rubric_fit": 2}') is None
    assert parse_scores("no scores here") is None


def test_truncate_at_sentence_boundary() -> None:
    text = " ".join(f"Sentence {k} has five words." for k in range(30))
    cut = truncate_words(text, 12)
    assert cut == "Sentence 0 has five words. Sentence 1 has five words."
    assert truncate_words("one two three", 5) == "one two three"
    run_on = "a " * 50 + "end."
    assert count_words(truncate_words(run_on, 10)) == 10 and truncate_words(run_on, 10).endswith("…")


def test_filter_rule_checks() -> None:
    rule = FilterRule()
    good_c = {"factuality": 5, "relevance": 5, "helpfulness": 5, "rubric_fit": 4}
    good_r = {"factuality": 4, "relevance": 5, "helpfulness": 4, "rubric_fit": 2}
    assert failed_checks(rule, good_c, good_r, 60, 40) == []  # ratio exactly 1.5 is kept
    assert failed_checks(rule, good_c, good_r, 61, 40) == ["length ratio too large"]
    bad_r = {**good_r, "rubric_fit": 3, "factuality": 3}
    assert failed_checks(rule, good_c, bad_r, 50, 50) == ["rejected rubric fit too high", "factuality gap too large"]
    assert failed_checks(FilterRule(max_rejected_fit=3, max_quality_gap=2), good_c, bad_r, 50, 50) == []
    rec = {"chosen": {"words": 10, "error": None}, "rejected": {"words": 10, "error": None},
           "validation": {"chosen": {"scores": good_c}, "rejected": {"scores": None, "error": "unparseable"}}}
    assert decide(rec, rule) == ["validation parse failure"]


# -- the pipeline with an in-process engine -------------------------------------------------
def test_build_decisions_and_report(source: Path, tmp_path: Path) -> None:
    gen, val = ScriptedEngine(), ScriptedEngine()
    res = build_benchmark(config(source), tmp_path / "out", generator=gen, validator=val)
    decisions = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out" / "decisions.jsonl").open()}
    assert {i for i, d in decisions.items() if d["kept"]} == KEPT
    assert {i: d["reasons"][0] for i, d in decisions.items() if not d["kept"]} == FIRST_REASONS
    assert decisions["ex-011"]["reasons"] == ["rejected rubric fit too high", "helpfulness gap too large"]

    rep = res.report
    every = rep["all"]
    assert (every["processed"], every["kept"], every["dropped"]) == (12, 6, 6)
    assert every["dropped_by_reason"] == {"validation parse failure": 1, "chosen rubric fit too low": 1,
                                          "rejected rubric fit too high": 2, "factuality gap too large": 1,
                                          "length ratio too large": 1}
    assert every["failed_checks"]["helpfulness gap too large"] == 1
    assert every["generation"] == {"regenerated": {"chosen": 2, "rejected": 1},
                                   "truncated": {"chosen": 1, "rejected": 1}, "failed": 0}
    assert every["validation"] == {"answers_scored": 23, "parse_failures": 3, "retried": 2, "unreadable": 1}
    cats = rep["categories"]
    assert {c: (s["kept"], s["dropped"]) for c, s in cats.items()} == {
        "Art_and_Entertainment": (3, 1), "Lifestyle_and_Personal_Development": (2, 2), "Society_and_Culture": (1, 3)}
    arts = cats["Art_and_Entertainment"]["scales_kept"]
    assert arts["relevance"]["chosen"] == {"mean": round(14 / 3, 4), "min": 4.0, "max": 5.0, "n": 3}
    assert arts["rubric_fit"]["chosen"]["mean"] == 5 and arts["rubric_fit"]["rejected"]["mean"] == 1
    assert arts["rubric_fit"]["gap"] == 4
    length = cats["Art_and_Entertainment"]["length_kept"]  # items 0, 6, 9: 14/14, 100/100, 13/14 words
    assert length["chosen_words"] == {"mean": round(127 / 3, 4), "min": 13.0, "max": 100.0, "n": 3}
    assert length["ratio"]["max"] == pytest.approx(14 / 13, abs=1e-4)
    # the validated-but-dropped pairs appear only in scales_validated
    assert every["scales_validated"]["factuality"]["rejected"]["min"] == 3
    assert every["scales_kept"]["factuality"]["rejected"]["min"] == 5

    rec6 = next(r for r in res.records if r["id"] == "ex-006")
    assert rec6["chosen"]["first_words"] == 120 and rec6["chosen"]["words"] == 100 and rec6["chosen"]["truncated"]
    assert rec6["chosen"]["text"].endswith("quiet day.")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| rubric fit | 5.00 (5-5) | 1.00 (1-1) |" in md and "| validation parse failure | 0 | 0 | 1 | 1 |" in md


def test_export_loads_everywhere(source: Path, tmp_path: Path) -> None:
    import datasets
    from typer.testing import CliRunner

    from prbench import evaluate
    from prbench.cli.data import app as data_app
    from prbench.data import load_examples

    out = tmp_path / "out"
    res = build_benchmark(config(source), out, generator=ScriptedEngine(), validator=ScriptedEngine())
    assert res.counts == {"Art_and_Entertainment": 3, "Lifestyle_and_Personal_Development": 2,
                          "Society_and_Culture": 1}
    assert sorted(p.name for p in (out / "data").iterdir()) == [f"{c}.parquet" for c in sorted(res.counts)]
    assert sorted(p.name for p in (out / "jsonl").iterdir()) == [f"{c}.jsonl" for c in sorted(res.counts)]
    r = CliRunner().invoke(data_app, ["validate", str(out / "data")])
    assert r.exit_code == 0, r.output
    assert "6 valid records" in r.output
    assert len(load_examples(out / "jsonl")) == 6
    ds = datasets.load_dataset("parquet", data_files={"test": str(out / "data" / "*.parquet")},
                               cache_dir=str(tmp_path / "hfcache"))["test"]
    assert ds.num_rows == 6 and set(ds.column_names) >= {"id", "question", "profile", "rubric_aspects", "narrative",
                                                         "category", "chosen", "rejected"}
    arts = datasets.load_dataset(str(out), "Art_and_Entertainment", split="test",  # via the card's configs
                                 cache_dir=str(tmp_path / "hfcache"))
    assert sorted(arts["id"]) == ["ex-000", "ex-006", "ex-009"]
    ex = next(x for x in load_examples(out / "data") if x.id == "ex-000")
    assert ex.chosen == CHOSEN.format(t="hiking") and ex.rejected == REJECTED and len(ex.profile) == 6
    ev = evaluate("baseline:length", str(out / "data"), "none")
    assert ev.summary.n == 6
    card = (out / "README.md").read_text()
    for needle in ("config_name: Art_and_Entertainment", "path: data/Art_and_Entertainment.parquet",
                   "fake:gen", "fake:val", "rubric_fit >= 4", "| total | 6 |", "Licence", "`chosen`"):
        assert needle in card


def test_filter_thresholds_refilter_without_calls(source: Path, tmp_path: Path) -> None:
    gen, val = ScriptedEngine(), ScriptedEngine()
    build_benchmark(config(source), tmp_path / "out", generator=gen, validator=val)
    n_gen, n_val = len(gen.log), len(val.log)
    res = build_benchmark(config(source, max_length_ratio=3.0, max_rejected_fit=3), tmp_path / "out",
                          generator=gen, validator=val)
    assert (len(gen.log), len(val.log)) == (n_gen, n_val)  # decisions come from stored scores
    assert res.report["all"]["kept"] == 8  # + item 2 (fit 3 allowed) and item 7 (ratio 2.14 allowed)


def test_resume_after_interruption(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    gen, val = ScriptedEngine(), ScriptedEngine()

    def stop_after_first_batch(done: int, total: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_benchmark(config(source), out, generator=gen, validator=val, on_progress=stop_after_first_batch)
    assert len((out / "build" / "examples.jsonl").read_text().splitlines()) == 4
    gen2, val2 = ScriptedEngine(), ScriptedEngine()
    res = build_benchmark(config(source), out, generator=gen2, validator=val2, cache=NullCache())
    assert {i for i, _ in gen2.log} == set(range(4, 12))  # nothing for finished items 0-3, even uncached
    assert res.summary.resumed_from == 4 and isinstance(res.summary, BuildSummary)
    assert res.written == json.loads((out / "build" / "summary.json").read_text())  # the file as the driver wrote it
    fresh = build_benchmark(config(source), tmp_path / "fresh", generator=ScriptedEngine(),
                            validator=ScriptedEngine())
    for cat in fresh.counts:
        assert (out / "jsonl" / f"{cat}.jsonl").read_text() == (tmp_path / "fresh" / "jsonl" / f"{cat}.jsonl").read_text()
    assert res.report == fresh.report


def test_cache_answers_a_repeated_build(source: Path, tmp_path: Path) -> None:
    build_benchmark(config(source), tmp_path / "a", generator=ScriptedEngine(), validator=ScriptedEngine())
    gen = ScriptedEngine()
    res = build_benchmark(config(source), tmp_path / "b", generator=gen, validator=ScriptedEngine())
    assert gen.log == [] and res.written["calls"]["generator"]["cache_hits"] > 0


def test_seeds_are_per_item_and_role(source: Path, tmp_path: Path) -> None:
    seen: dict[tuple[int, str], list[int]] = {}

    class SeedLog(ScriptedEngine):
        def generate(self, prompts, params):
            for m, p in zip(prompts, params):
                seen.setdefault((_item(m[-1]["content"]), role_of(m)), []).append(p.seed)
            return super().generate(prompts, params)

    build_benchmark(config(source, limit=6), tmp_path / "a", generator=SeedLog(), validator=ScriptedEngine(),
                    cache=NullCache())
    first = dict(seen)
    seen.clear()
    build_benchmark(config(source, limit=6), tmp_path / "b", generator=SeedLog(), validator=ScriptedEngine(),
                    cache=NullCache(), overwrite=True)
    assert seen == first
    assert first[(0, "chosen")] != first[(0, "rejected")] != first[(1, "rejected")]
    assert len(set(first[(5, "chosen")])) == 2  # the regeneration uses a new derived seed


def test_push_to_hub_without_token_is_a_clear_error(source: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(PrbenchError, match="HF_TOKEN"):
        build_benchmark(config(source, limit=3), tmp_path / "out", generator=ScriptedEngine(),
                        validator=ScriptedEngine(), push_to="me/my-bench")
    assert (tmp_path / "out" / "data").is_dir()  # the local dataset is written before the push


# -- over HTTP: a real OpenAI-compatible server as generator and validator ------------------
def _http_reply(body: dict) -> str:
    return scripted_reply(body["messages"])


def _kinds(requests: list[dict]) -> list[tuple[int, str]]:
    return [(_item(b["messages"][-1]["content"]), role_of(b["messages"])) for b in requests]


def test_http_build_via_cli(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from prbench import evaluate
    from prbench.capabilities.build.command import app
    from prbench.cli.data import app as data_app
    from prbench.testing.openai_server import Fault, serve

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    out = tmp_path / "out"
    t0 = time.perf_counter()
    with serve(_http_reply, faults={3: Fault.server_error(503)}) as srv:  # one transient failure, retried
        r = CliRunner().invoke(app, [
            "--source", str(source), "--generator", "openai:fake-model", "--generator-base-url", srv.base_url,
            "--validator", "openai:fake-model", "--validator-base-url", srv.base_url, "--out", str(out),
            "--top-k", "3", "--batch-size", "4", "--seed", "7", "--json"])
        assert r.exit_code == 0, r.output + repr(r.exception)
        kinds = _kinds(srv.requests)
    summary = json.loads(r.output)
    assert (summary["processed"], summary["kept"], summary["dropped"]) == (12, 6, 6)
    # Generator: 24 first drafts + 3 regenerations (items 5, 6, 6) + POST 3 (a draft) sent again after its 503.
    # Validator: 24 answers + 2 re-validations (item 8 rejected, item 9 chosen).
    assert sum(k[1] != "validate" for k in kinds) == 24 + 3 + 1
    assert sum(k[1] == "validate" for k in kinds) == 24 + 2
    decisions = {json.loads(x)["id"]: json.loads(x) for x in (out / "decisions.jsonl").open()}
    assert {i for i, d in decisions.items() if d["kept"]} == KEPT
    assert {i: d["reasons"][0] for i, d in decisions.items() if not d["kept"]} == FIRST_REASONS
    r = CliRunner().invoke(data_app, ["validate", str(out / "data")])
    assert r.exit_code == 0 and "6 valid records" in r.output, r.output
    assert evaluate("baseline:length", str(out / "data"), "none").summary.n == 6
    assert time.perf_counter() - t0 < 60


def test_http_resume_makes_no_requests_for_finished_items(source: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.engines import load_engine
    from prbench.testing.openai_server import serve

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    out = tmp_path / "out"

    def interrupt(done: int, total: int) -> None:
        if done >= 8:
            raise KeyboardInterrupt  # like Ctrl-C after two batches

    with serve(_http_reply) as srv:
        cfg = config(source)
        engine = load_engine("openai:fake-model", base_url=srv.base_url)
        with pytest.raises(KeyboardInterrupt):
            build_benchmark(cfg, out, generator=engine, validator=engine, on_progress=interrupt)
        srv.clear()
        res = build_benchmark(cfg, out, generator=engine, validator=engine, cache=NullCache())
        items = {i for i, _ in _kinds(srv.requests)}
    assert items == {8, 9, 10, 11}  # zero requests of any kind for the 8 finished items
    assert res.summary.resumed_from == 8 and res.report["all"]["kept"] == 6


def test_push_to_hub_uploads_card_and_parquet(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    calls: dict = {}

    class FakeApi:
        def __init__(self, token: str):
            calls["token"] = token

        def create_repo(self, repo_id: str, **kw) -> None:
            calls["create"] = (repo_id, kw["repo_type"])

        def upload_folder(self, **kw):
            calls["upload"] = kw
            return type("Info", (), {"commit_url": "https://example.invalid/commit/1"})()

    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    res = build_benchmark(config(source, limit=3), tmp_path / "out", generator=ScriptedEngine(),
                          validator=ScriptedEngine(), push_to="me/my-bench")
    assert calls["token"] == "hf_test" and calls["create"] == ("me/my-bench", "dataset")
    assert calls["upload"]["allow_patterns"] == ["README.md", "data/*.parquet"]
    assert calls["upload"]["repo_type"] == "dataset" and str(res.summary.pushed_to).endswith("/commit/1")


# -- human validation round trip ------------------------------------------------------------
def test_annotate_and_agreement(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_benchmark(config(source), out, generator=ScriptedEngine(), validator=ScriptedEngine())
    info = export_annotation(out, tmp_path / "ann" / "batch1", n=4, seed=3)
    assert info["pairs"] == 4 and info["responses"] == 8
    csv_path, key_path = Path(info["csv"]), Path(info["key"])
    page = Path(info["html"]).read_text()
    assert "<script" in page and "http://" not in page and "https://" not in page and "src=" not in page
    rows = list(csv.DictReader(csv_path.open()))
    assert all(r["factuality"] == "" for r in rows)
    text = csv_path.read_text()
    assert "chosen" not in text.lower() and "ex-0" not in text  # blind: neither role nor item id
    key = json.loads(key_path.read_text())
    again = export_annotation(out, tmp_path / "ann2" / "batch1", n=4, seed=3)
    assert json.loads(Path(again["key"]).read_text())["pairs"] == key["pairs"]  # seeded
    assert {p["A"] for p in key["pairs"].values()} == {"chosen", "rejected"}  # order is randomised

    # Synthetic annotator: copies the validator exactly -> perfect agreement.
    for r in rows:
        v = key["pairs"][r["pair"]]["validator"][key["pairs"][r["pair"]][r["response"]]]
        r.update({s: str(v[s]) for s in ("factuality", "relevance", "helpfulness", "rubric_fit")})
    filled = tmp_path / "ann" / "batch1.filled.csv"
    with filled.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    res = agreement(filled)
    assert res["scales"]["rubric_fit"]["spearman"] == pytest.approx(1.0)
    assert res["scales"]["rubric_fit"]["kappa_binned"] == pytest.approx(1.0)
    assert res["scales"]["factuality"]["spearman"] is None  # constant scores: undefined, not faked
    assert res["human_prefers_chosen_on_rubric_fit"]["all"] == 1.0

    # Hand-computed case on rubric_fit: validator gives chosen 5 and rejected 1 on every pair;
    # the human gives chosen 4 and rejected (2, 3, 2, 1) over the four pairs in pair order.
    human_rejected = {"P001": "2", "P002": "3", "P003": "2", "P004": "1"}
    for r in rows:
        role = key["pairs"][r["pair"]][r["response"]]
        r["rubric_fit"] = "4" if role == "chosen" else human_rejected[r["pair"]]
    r0 = rows[0]
    r0["relevance"] = ""  # one missing score is skipped, not guessed
    with filled.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    res = agreement(filled, key_path)
    # Spearman by hand: human ranks (chosen 6.5 x4; rejected 2.5, 4, 2.5, 1), validator ranks (6.5 x4, 2.5 x4);
    # deviations from 4.5: cov = 16 + 4 + 1 + 4 + 7 = 32, var_v = 32, var_h = 16 + 20.5 = 36.5,
    # rho = 32 / sqrt(32 * 36.5).
    assert res["scales"]["rubric_fit"]["spearman"] == pytest.approx(32 / (32 * 36.5) ** 0.5)
    # bins: human high x4, low x3, mid x1; validator high x4, low x4 -> po = 7/8, pe = 0.5*0.5 + 0.375*0.5
    po, pe = 7 / 8, 0.5 * 0.5 + (3 / 8) * 0.5
    assert res["scales"]["rubric_fit"]["kappa_binned"] == pytest.approx((po - pe) / (1 - pe))
    assert res["scales"]["relevance"]["n"] == 7
    assert res["human_table"]["all"]["rubric_fit"]["rejected"] == {"mean": 2.0, "min": 1.0, "max": 3.0, "n": 4}
    assert res["human_table"]["all"]["rubric_fit"]["gap"] == 2.0


def test_kappa_and_bins() -> None:
    assert [score_bin(s) for s in (1, 2, 3, 4, 5)] == ["low", "low", "mid", "high", "high"]
    assert cohen_kappa(["low", "high"], ["low", "high"]) == 1.0
    assert cohen_kappa(["low", "low"], ["high", "high"]) == 0.0
    assert cohen_kappa(["high"] * 3, ["high"] * 3) is None


# -- CLI ------------------------------------------------------------------------------------
def test_cli_requires_options_and_runs_subcommands(source: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prbench.capabilities.build.command import app

    r = CliRunner().invoke(app, ["--source", str(source)])
    assert r.exit_code != 0 and "--generator" in (r.output + str(r.exception))
    out = tmp_path / "out"
    build_benchmark(config(source), out, generator=ScriptedEngine(), validator=ScriptedEngine())
    r = CliRunner().invoke(app, ["annotate", str(out), "--n", "3", "--out", str(tmp_path / "b2")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b2.csv").is_file() and (tmp_path / "b2.key.json").is_file()
    r = CliRunner().invoke(app, ["agreement", str(tmp_path / "b2.csv"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["responses_unscored"] == 6


BUILD_OWN_FLAGS = {"source", "generator", "validator", "out", "generator_base_url", "validator_base_url", "no_cache",
                   "overwrite", "push_to_hub", "max_usd", "prices", "batch", "no_wait", "quiet",
                   "json_out"}


def test_cli_options_are_the_settings_fields() -> None:
    """Every BuildSettings field (and the engine access minus the one base URL) is one `prbench build` flag
    with the field's own default and help; the other flags are the inputs, endpoints and output."""
    import typer

    from prbench.build.settings import BuildSettings
    from prbench.capabilities.build.command import app
    from prbench.config import EngineAccess

    params = {p.name: p for p in typer.main.get_command(app).params
              if p.name not in ("install_completion", "show_completion")}
    fields = {**BuildSettings.model_fields,
              **{n: f for n, f in EngineAccess.model_fields.items() if n != "base_url"}}
    assert set(params) == set(fields) | BUILD_OWN_FLAGS
    for name, f in fields.items():
        p = params[name]
        assert p.opts == ["--" + name.replace("_", "-")], name
        assert (p.default, p.help) == (",".join(f.default) if isinstance(f.default, list) else f.default,
                                       f.description), name
    # the API's config is the same settings plus the inputs and the engines' options
    assert set(BuildConfig.model_fields) - set(BuildSettings.model_fields) == {
        "source", "generator", "validator", "generator_options", "validator_options"}


def test_cli_and_api_builds_agree(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same options through `prbench build` and through `BuildConfig` write the same build."""
    from typer.testing import CliRunner

    from prbench.capabilities.build.command import app

    monkeypatch.setattr("prbench.build.pipeline.load_engine", lambda spec, **kw: ScriptedEngine(spec))
    cats = ["Art_and_Entertainment", "Society_and_Culture"]
    r = CliRunner().invoke(app, [
        "--source", str(source), "--generator", "fake:gen", "--validator", "fake:val", "--out", str(tmp_path / "cli"),
        "--top-k", "3", "--batch-size", "4", "--seed", "7", "--limit", "10", "--categories", ",".join(cats),
        "--max-words", "90", "--max-rejected-fit", "3", "--max-length-ratio", "3", "--temperature", "0.5",
        "--top-p", "0.8", "--repetition-penalty", "1.1", "--max-new-tokens", "200",
        "--validator-max-new-tokens", "100", "--max-context-chars", "4000", "--license", "mit", "--no-cache", "-q"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    build_benchmark(config(source, seed=7, limit=10, categories=cats, max_words=90, max_rejected_fit=3,
                           max_length_ratio=3, temperature=0.5, top_p=0.8, repetition_penalty=1.1,
                           max_new_tokens=200, validator_max_new_tokens=100, max_context_chars=4000, license="mit"),
                    tmp_path / "api", cache=NullCache())
    cli, api = tmp_path / "cli", tmp_path / "api"
    ident = json.loads((api / "build" / "config.json").read_text())
    assert (ident["seed"], ident["top_p"], ident["max_context_chars"]) == (7, 0.8, 4000)  # the options took hold
    assert "license: mit" in (cli / "README.md").read_text()
    files = sorted(p.relative_to(api) for p in api.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(cli) for p in cli.rglob("*") if p.is_file())
    for rel in files:
        if rel.name in ("build_config.json", "report.json", "summary.json"):  # 3 vs 3.0, wall time
            a, c = json.loads((api / rel).read_text()), json.loads((cli / rel).read_text())
            if rel.name == "summary.json":
                a.pop("wall_time_s"), c.pop("wall_time_s")
            assert a == c, rel
        else:
            assert (api / rel).read_bytes() == (cli / rel).read_bytes(), rel


def test_config_is_a_strict_frozen_settings_model(source: Path) -> None:
    with pytest.raises(PrbenchError, match="generator_options: 'api_key' looks like a secret"):
        config(source, generator_options={"api_key": "sk-abcdefghijklmnopqrstuvwxyz"})
    for bad in ({"max_words": 0}, {"seed": "3"}, {"max_new_tokens": 2.5}, {"limit": 0}, {"temperature": -1}):
        with pytest.raises(ValueError):
            config(source, **bad)
    cfg = config(source, max_rejected_fit=3, max_length_ratio=2.5)
    with pytest.raises(ValueError):
        cfg.top_k = 5  # frozen: a changed copy is `cfg.model_copy(update=...)`
    # a threshold given as a whole number is stored as given, as the dataclass did: build files read the same
    assert (repr(cfg.max_rejected_fit), repr(cfg.max_length_ratio), repr(cfg.min_chosen_fit)) == ("3", "2.5", "4")


# -- the real thing, slowly: SmolLM2-135M on CPU as generator and validator -----------------
@pytest.mark.slow
def test_smollm2_build_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quality is poor at 135M parameters; what this proves is the path: real engine, real prompts,
    real parsing, export and report, with every item accounted for."""
    from typer.testing import CliRunner

    from prbench.capabilities.build.command import app

    # The converted model lives in the user's cache (converting it takes a while); calls are not cached.
    if _USER_CACHE is None:
        monkeypatch.delenv("PRBENCH_CACHE_DIR")
    else:
        monkeypatch.setenv("PRBENCH_CACHE_DIR", _USER_CACHE)
    out = tmp_path / "out"
    spec = "builtin:smollm2-135m-instruct"
    r = CliRunner().invoke(app, ["--source", "sample:source", "--generator", spec, "--validator", spec,
                                 "--out", str(out), "--limit", "2", "--top-k", "3", "--max-new-tokens", "160",
                                 "--validator-max-new-tokens", "64", "--no-cache", "--quiet"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    summary = json.loads((out / "build" / "summary.json").read_text())
    report = json.loads((out / "report.json").read_text())
    assert summary["processed"] == 2 and summary["kept"] + summary["dropped"] == summary["processed"]
    assert report["all"]["kept"] + report["all"]["dropped"] == report["all"]["processed"] == 2
    assert sum(report["all"]["dropped_by_reason"].values()) == report["all"]["dropped"]
    assert sum(summary["per_category"].values()) == summary["kept"]
    assert summary["calls"]["generator"]["requests"] >= 4 and summary["calls"]["validator"]["requests"] >= 4
    if summary["kept"]:
        from prbench.data import load_examples

        assert len(load_examples(out / "data")) == summary["kept"]
    for name in ("README.md", "report.md", "report.json", "decisions.jsonl", "build/examples.jsonl",
                 "build/summary.json", "build/config.json"):
        assert (out / name).is_file(), name
    records = [json.loads(x) for x in (out / "build" / "examples.jsonl").open()]
    assert len(records) == 2 and all(r["chosen"]["words"] <= 100 and r["rejected"]["words"] <= 100 for r in records)
    assert len(list((out / "data").glob("*.parquet"))) == len(summary["per_category"])

