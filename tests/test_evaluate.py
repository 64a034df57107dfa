"""The evaluation engine: conditions, leakage, scalar RMs, plug-ins, resume and determinism."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.context.conditions import CONDITIONS, View
from prbench.rewards import PairwiseRM, PointwiseRM, Score, Verdict, load_rm
from prbench.rewards.classifier import SequenceClassifierRM
from prbench.store.cache import NullCache
from prbench.testing.records import make_record, make_records
from prbench.testing.tiny import make_tiny_seq_classifier

NARRATIVE_MARK = "zqnarrativesecret"
RUBRIC_MARK = "zqrubricsecret"
EVIDENCE_MARK = "zqevidencesecret"


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    recs = make_records(12)
    for r in recs:
        r["narrative"] += f" {NARRATIVE_MARK} {EVIDENCE_MARK}"
        r["rubric_aspects"][0]["aspect"] += f" {RUBRIC_MARK}"
        r["rubric_aspects"][0]["evidence"] = f"{EVIDENCE_MARK}"
    planner = tmp_path / "planner.jsonl"
    planner.write_text("".join(json.dumps({"id": r["id"], "aspects": [{"aspect": "Guessed aspect", "reason": "r"}]})
                               + "\n" for r in recs), encoding="utf-8")
    return write_jsonl(tmp_path / "bench.jsonl", recs)


@pytest.fixture(scope="module")
def tiny_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_seq_classifier(tmp_path_factory.mktemp("rm") / "tiny-rm", seed=1)


class Recorder(PointwiseRM):
    """Records every (view, response) it is asked to score, rendered as the RM would see it."""

    spec = "recorder"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def score(self, batch):
        self.seen.extend(f"{v.prompt()}\n---\n{r}" for v, r in batch)
        return [Score(float(len(r))) for _, r in batch]


def test_no_leakage_of_narrative_or_rubric(data: Path) -> None:
    planner = str(data.parent / "planner.jsonl")
    for cond in CONDITIONS:
        rec = Recorder()
        evaluate(rec, str(data), cond, planner_file=planner)
        text = "\n".join(rec.seen)
        assert NARRATIVE_MARK not in text and EVIDENCE_MARK not in text, cond
        assert (RUBRIC_MARK in text) == (cond == "oracle"), cond
        if cond in ("profile", "wrong-profile"):
            assert "Earlier posts by this user" in text
        if cond == "planner":
            assert "Guessed aspect" in text


def test_hf_classifier_sees_no_leak(data: Path, tiny_rm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    original = SequenceClassifierRM.encode

    def spy(self, prompt: str, response: str):
        seen.append(prompt + response)
        return original(self, prompt, response)

    monkeypatch.setattr(SequenceClassifierRM, "encode", spy)
    for cond in ("none", "profile", "oracle", "wrong-profile"):
        seen.clear()
        evaluate(f"hf:{tiny_rm_dir}", str(data), cond)
        assert seen and not any(NARRATIVE_MARK in s or EVIDENCE_MARK in s for s in seen)
        assert any(RUBRIC_MARK in s for s in seen) == (cond == "oracle")


def test_baselines_on_planted_data(data: Path) -> None:
    acc = {(m, c): evaluate(f"baseline:{m}", str(data), c).summary.accuracy
           for m in ("length", "short", "random", "lexical") for c in ("none", "oracle")}
    assert acc[("length", "none")] + acc[("short", "none")] == pytest.approx(1.0)
    assert acc[("lexical", "oracle")] == 1.0  # chosen echoes the rubric's topic; rejected does not
    assert 0.0 <= acc[("random", "none")] <= 1.0


def test_wrong_profile_uses_another_user(data: Path) -> None:
    res = evaluate("baseline:lexical", str(data), "wrong-profile", seed=3)
    users = {r["id"]: r["user_id"] for r in map(json.loads, data.read_text().splitlines())}
    assert all(users[r.donor] != r.user_id for r in res.records)
    again = evaluate("baseline:lexical", str(data), "wrong-profile", seed=3)
    assert [r.donor for r in again.records] == [r.donor for r in res.records]


def test_hf_rm_every_condition_and_batch_invariance(data: Path, tiny_rm_dir: Path) -> None:
    planner = str(data.parent / "planner.jsonl")
    for cond in CONDITIONS:
        one = evaluate(f"hf:{tiny_rm_dir}", str(data), cond, batch_size=1, planner_file=planner)
        many = evaluate(f"hf:{tiny_rm_dir}", str(data), cond, batch_size=8, planner_file=planner)
        assert one.summary.n == 12
        for a, b in zip(one.records, many.records):
            assert a.score_chosen == pytest.approx(b.score_chosen, abs=1e-4)
            assert a.score_rejected == pytest.approx(b.score_rejected, abs=1e-4)


def test_classifier_tokenizes_in_one_step(tiny_rm_dir: Path) -> None:
    rm = load_rm(f"hf:{tiny_rm_dir}")
    ids = rm.encode("hello", "world")
    bos = rm.tokenizer.bos_token_id
    assert ids.count(bos) <= 1
    text = rm.tokenizer.decode(ids)
    assert "hello" in text and "world" in text


def test_pad_token_missing_and_no_template(tmp_path: Path) -> None:
    d = make_tiny_seq_classifier(tmp_path / "nopad", pad_token=False, chat_template=False)
    rm = load_rm(f"hf:{d}")
    view = View("x", "q?", "none")
    s1 = rm.score([(view, "short answer")])[0].value
    s2 = rm.score([(view, "short answer"), (view, "a much longer answer than the first one")])[0].value
    assert math.isfinite(s1) and s1 == pytest.approx(s2, abs=1e-5)


def test_truncation_counted_profile_cut_first(data: Path, tiny_rm_dir: Path) -> None:
    res = evaluate(f"hf:{tiny_rm_dir}", str(data), "profile", model_options={"max_length": 300})
    assert res.summary.metrics.truncated_inputs > 0
    assert res.summary.metrics.n_invalid == 0
    tight = evaluate(f"hf:{tiny_rm_dir}", str(data), "none", model_options={"max_length": 40})
    assert tight.summary.metrics.n_invalid == 12  # the bare question does not fit: invalid, not cut
    assert all(r.credit is None and "max_length" in r.invalid for r in tight.records)


def test_py_plugin(data: Path, tmp_path: Path) -> None:
    plugin = tmp_path / "my_rm.py"
    plugin.write_text(
        "from prbench.rewards import PointwiseRM, Score\n"
        "class Mine(PointwiseRM):\n"
        "    def __init__(self, **_):\n        pass\n"
        "    def score(self, batch):\n"
        "        return [Score(float('weekend' in r)) for _, r in batch]\n",
        encoding="utf-8",
    )
    res = evaluate(f"py:{plugin}:Mine", str(data), "none")
    assert res.summary.model == f"py:{plugin}:Mine" and res.summary.n == 12


class Flaky(PointwiseRM):
    spec = "flaky"

    def score(self, batch):
        return [Score(math.nan if "city tour" in r and v.example_id.endswith("3") else 1.0) for v, r in batch]


def test_nan_scores_are_invalid_not_ties(data: Path) -> None:
    res = evaluate(Flaky(), str(data), "none")
    m = res.summary.metrics
    assert m.n_invalid == 1 and m.n == 11 and m.ties == 11


def test_resume_after_interruption_gives_identical_files(data: Path, tmp_path: Path) -> None:
    clean = evaluate("baseline:lexical", str(data), "profile", out=tmp_path / "a", batch_size=2)
    full = clean.path.joinpath("examples.jsonl").read_bytes()
    part = evaluate("baseline:lexical", str(data), "profile", out=tmp_path / "b", batch_size=2)
    lines = part.path.joinpath("examples.jsonl").read_bytes().splitlines(keepends=True)
    part.path.joinpath("examples.jsonl").write_bytes(b"".join(lines[:5]) + lines[5][:17])  # torn write
    resumed = evaluate("baseline:lexical", str(data), "profile", out=tmp_path / "b", batch_size=5)
    assert resumed.summary.resumed_from == 5
    assert resumed.path.joinpath("examples.jsonl").read_bytes() == full


def test_same_seed_identical_across_batch_sizes(data: Path, tiny_rm_dir: Path, tmp_path: Path) -> None:
    """Scores agree within 1e-5 across batch sizes (float kernel noise); the same batch size gives the same bytes."""
    def run(name: str, batch_size: int):
        return evaluate(f"hf:{tiny_rm_dir}", str(data), "profile", out=tmp_path / name, batch_size=batch_size,
                        cache=NullCache())

    def recs(res) -> list[dict]:
        return [json.loads(line) for line in res.path.joinpath("examples.jsonl").read_text().splitlines()]

    a, b, again = run("a", 1), run("b", 7), run("again", 1)
    assert a.path.joinpath("examples.jsonl").read_bytes() == again.path.joinpath("examples.jsonl").read_bytes()
    score_fields = ("score_chosen", "score_rejected", "margin")
    ra, rb = recs(a), recs(b)
    assert [r["id"] for r in ra] == [r["id"] for r in rb]
    for x, y in zip(ra, rb):
        strip = lambda r: {k: v for k, v in r.items() if k not in score_fields + ("credit",)}
        assert strip(x) == strip(y)
        for f in score_fields:
            assert y[f] == pytest.approx(x[f], rel=1e-5, abs=1e-6), (x["id"], f)
        if abs(x["margin"]) > 1e-4:  # a near-tie may flip with the noise; anything else may not
            assert y["credit"] == x["credit"]


def test_config_mismatch_is_refused(data: Path, tmp_path: Path) -> None:
    from prbench.errors import PrbenchError

    evaluate("baseline:length", str(data), "none", out=tmp_path, seed=1)
    run = next(tmp_path.rglob("config.json")).parent
    cfg = json.loads((run / "config.json").read_text())
    cfg["top_k"] = 3
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PrbenchError, match="different config"):
        evaluate("baseline:length", str(data), "none", out=tmp_path, seed=1)


def test_retry_failed(data: Path, tmp_path: Path) -> None:
    res = evaluate(Flaky(), str(data), "none", out=tmp_path, cache=NullCache())
    assert res.summary.metrics.n_invalid == 1

    class Fixed(Flaky):
        def score(self, batch):
            return [Score(1.0 if "weekend" in r else 0.0) for _, r in batch]

    again = evaluate(Fixed(), str(data), "none", out=tmp_path, retry_failed=True, cache=NullCache())
    assert again.summary.metrics.n_invalid == 0 and again.summary.resumed_from == 11
    ids = [r.id for r in again.records]
    assert ids == sorted(ids)


def test_wrong_profile_needs_another_user(tmp_path: Path) -> None:
    from prbench.errors import PrbenchError

    one_user = write_jsonl(tmp_path / "one.jsonl", [make_record(i, user=0) for i in range(3)])
    with pytest.raises(PrbenchError, match="no other user's profile"):
        evaluate("baseline:length", str(one_user), "wrong-profile")


def test_shared_prefix_equals_full_scoring(tiny_rm_dir: Path) -> None:
    from prbench.context.conditions import build_views
    from prbench.context.retrieval import load_retriever
    from prbench.data import load_examples

    items = load_examples("sample", limit=6)
    views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=1)  # fits 1024 byte-tokens
    batch = [(v, r) for ex, v in zip(items, views) for r in (ex.chosen, ex.rejected, ex.gold_answer)]
    shared = load_rm(f"hf:{tiny_rm_dir}", batch_size=2)
    full = load_rm(f"hf:{tiny_rm_dir}", share_prefix=False, batch_size=2)
    a = [s.value for s in shared.score(batch)]
    b = [s.value for s in full.score(batch)]
    assert a == pytest.approx(b, abs=1e-4)
    assert shared.counts["truncated"] == 0
    # three responses per prompt: the prefix runs once instead of three times
    assert shared.counts["prefix_tokens_saved"] > 0.2 * shared.counts["tokens"]
    assert full.counts["prefix_tokens_saved"] == 0


@pytest.mark.slow
def test_ray_workers_match_single_process(data: Path, tiny_rm_dir: Path, tmp_path: Path) -> None:
    from prbench.evaluation.distributed import shutdown

    single = evaluate(f"hf:{tiny_rm_dir}", str(data), "profile", out=tmp_path / "one", batch_size=2,
                      cache=NullCache())
    try:
        multi = evaluate(f"hf:{tiny_rm_dir}", str(data), "profile", out=tmp_path / "two", batch_size=2,
                         workers=2, cache=NullCache())
        import ray

        assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]  # prbench's own Ray: loopback only
    finally:
        shutdown()
    assert multi.summary.accuracy == single.summary.accuracy
    assert (multi.path / "examples.jsonl").read_bytes() == (single.path / "examples.jsonl").read_bytes()


class BiasedProbJudge(PairwiseRM):
    """Always prefers slot A, but gives a little more to the longer-keyword answer: a biased judge with signal."""

    spec = "biased-prob"

    def compare(self, batch):
        out = []
        for q in batch:
            p = 0.9 + (0.05 if "cheap" in q.response_a else -0.05 if "cheap" in q.response_b else 0.0)
            out.append(Verdict("A", meta={"p_a": p}))
        return out


def test_both_orders_probabilities_cancel_position_bias(data: Path) -> None:
    one = evaluate(BiasedProbJudge(), str(data), "none")
    both = evaluate(BiasedProbJudge(), str(data), "none", both_orders=True)
    assert one.summary.metrics.pairwise.share_verdict_A == 1.0
    assert both.summary.accuracy == 1.0  # averaged over positions, the signal decides
    assert all(r.consistent is False and r.p_chosen > 0.5 for r in both.records)
