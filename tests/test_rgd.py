"""Reward-guided decoding and the ICL baseline: exactness at w = 0, guidance, batching, caching, storage."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import transformers  # noqa: F401

from prbench.context.conditions import View
from prbench.engines.base import GenParams
from prbench.rewards.base import PointwiseRM, Score
from prbench.schema import Example, ProfilePost, RubricAspect
from prbench.store.cache import Cache
from prbench.store.records import GenerationSummary


class RecordingRM(PointwiseRM):
    """A pointwise RM from a plain function that counts what reaches it."""

    def __init__(self, fn: Callable[[str], float], spec: str = "test:recording"):
        self.fn, self.spec = fn, spec
        self.calls = 0
        self.texts: list[str] = []

    def fingerprint(self) -> dict:
        return {"spec": self.spec}

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        self.calls += 1
        self.texts.extend(t for _, t in batch)
        return [Score(float(self.fn(t))) for _, t in batch]


def letters(ch: str) -> Callable[[str], float]:
    def fn(text: str) -> float:
        return float(text.count(ch))
    return fn


def hashed(salt: str) -> Callable[[str], float]:
    """A reward that differs between almost any two texts (the tiny model's bytes rarely spell words)."""
    def fn(text: str) -> float:
        return (zlib.crc32(f"{salt}:{text}".encode()) % 1000) / 1000
    return fn


def make_examples(n: int = 3) -> list[Example]:
    out = []
    for i in range(n):
        out.append(Example(
            id=f"ex-{i}", user_id=f"u{i % 2}", category="Art_and_Entertainment",
            question=f"How do I develop film number {i} at home?",
            profile=[ProfilePost(id=f"p{i}-{j}", text=f"I develop film in a small bathroom, roll {j}.")
                     for j in range(3)],
            rubric_aspects=[RubricAspect(aspect="Cheap", reason="tight budget")],
            gold_answer=f"Use Rodinal at 20 degrees for roll {i}.",
            chosen=f"Use cheap Rodinal {i}.", rejected=f"Buy a lab service {i}."))
    return out


def _view(i: int = 0) -> View:
    return View(example_id=f"ex-{i}", question="q?", condition="none")


def _jobs(engine, texts: Sequence[str], seed: int = 0):
    from prbench.downstream.decoding import RGDJob

    return [RGDJob(engine.encode_chat([{"role": "user", "content": t}], True), _view(i), seed + i)
            for i, t in enumerate(texts)]


PROMPTS = ["Tell me about film.", "How to push HP5?", "A much longer question about developing black and white."]


# -- exactness and guidance ---------------------------------------------------------------------
@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_w0_reproduces_engine_greedy(tiny_engine, penalty):
    from prbench.downstream.decoding import RGDParams, rgd_decode

    rm = RecordingRM(letters("e"))
    from prbench.downstream.prefix_rewards import PrefixRewards

    outs = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS),
                      RGDParams(w=0.0, k=5, max_new_tokens=20, repetition_penalty=penalty),
                      PrefixRewards(rm), batch_size=3)
    ref = tiny_engine.generate([[{"role": "user", "content": t}] for t in PROMPTS],
                               GenParams(max_new_tokens=20, repetition_penalty=penalty))
    for o, r in zip(outs, ref):
        assert o.text == r.text
        assert len(o.token_ids) == r.n_tokens
        assert o.finish_reason == r.finish_reason
    assert rm.calls == 0  # w = 0 never asks the RM


def test_guidance_changes_output_and_batching_does_not(tiny_engine):
    from prbench.downstream.decoding import RGDParams, rgd_decode
    from prbench.downstream.prefix_rewards import PrefixRewards

    params = RGDParams(w=50.0, k=8, max_new_tokens=16, repetition_penalty=1.0)
    plain = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS), RGDParams(w=0, k=8, max_new_tokens=16,
                                                                             repetition_penalty=1.0))
    one = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS), params, PrefixRewards(RecordingRM(hashed("a"))),
                     batch_size=1)
    many = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS), params, PrefixRewards(RecordingRM(hashed("a"))),
                      batch_size=3)
    assert [o.token_ids for o in one] == [o.token_ids for o in many]
    assert [o.token_ids for o in one] != [o.token_ids for o in plain]
    assert sum(o.changed for o in one) > 0
    other = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS), params, PrefixRewards(RecordingRM(hashed("b"))))
    assert [o.token_ids for o in other] != [o.token_ids for o in one]
    small = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS), RGDParams(w=0.5, k=8, max_new_tokens=16,
                                                                             repetition_penalty=1.0),
                       PrefixRewards(RecordingRM(hashed("a"))))
    assert sum(o.changed for o in small) < sum(o.changed for o in one)  # a larger w moves more picks


def test_rm_batches_all_candidates_of_a_step_and_chunk_spaces_decisions(tiny_engine):
    from prbench.downstream.decoding import RGDParams, rgd_decode
    from prbench.downstream.prefix_rewards import PrefixRewards

    rm = RecordingRM(letters("e"))
    outs = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS[:2]),
                      RGDParams(w=1.0, k=4, chunk=5, max_new_tokens=12, repetition_penalty=1.0),
                      PrefixRewards(rm, batch_size=1000), batch_size=2)
    n_steps = max(len(o.token_ids) + (o.finish_reason == "stop") for o in outs)
    decision_steps = len(range(0, n_steps, 5))
    assert rm.calls <= decision_steps  # one RM call per decision point, both rows together
    for o in outs:
        assert o.decision_points == len(range(0, len(o.token_ids) + (o.finish_reason == "stop"), 5))


def test_sampling_is_seeded_per_item(tiny_engine):
    from prbench.downstream.decoding import RGDParams, rgd_decode
    from prbench.downstream.prefix_rewards import PrefixRewards

    params = RGDParams(w=1.0, k=8, max_new_tokens=12, temperature=5.0, repetition_penalty=1.0)
    a = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS, seed=7), params, PrefixRewards(RecordingRM(hashed("a"))),
                   batch_size=3)
    b = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS, seed=7)[1:], params,
                   PrefixRewards(RecordingRM(hashed("a"))), batch_size=1)
    c = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS, seed=99), params, PrefixRewards(RecordingRM(hashed("a"))))
    assert [o.token_ids for o in a[1:]] == [o.token_ids for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_invalid_rewards_are_neutral_and_counted(tiny_engine):
    from prbench.downstream.decoding import RGDParams, rgd_decode
    from prbench.downstream.prefix_rewards import PrefixRewards

    nan_rm = RecordingRM(lambda t: math.nan)
    guided = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS[:1]),
                        RGDParams(w=3.0, k=5, max_new_tokens=10, repetition_penalty=1.0), PrefixRewards(nan_rm))
    plain = rgd_decode(tiny_engine, _jobs(tiny_engine, PROMPTS[:1]),
                       RGDParams(w=0.0, k=5, max_new_tokens=10, repetition_penalty=1.0))
    assert guided[0].token_ids == plain[0].token_ids
    assert guided[0].invalid_rewards > 0


def test_shape_rewards():
    from prbench.downstream.prefix_rewards import shape_rewards

    r, bad = shape_rewards(np.array([1.0, np.nan, 3.0]), "none")
    assert bad == 1 and r.tolist() == [1.0, 2.0, 3.0]
    z, _ = shape_rewards(np.array([1.0, 2.0, 3.0]), "zscore")
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1.0) < 1e-12
    assert shape_rewards(np.array([2.0, 2.0]), "zscore")[0].tolist() == [0.0, 0.0]
    assert shape_rewards(np.array([np.nan, np.nan]), "none")[0].tolist() == [0.0, 0.0]


def test_prefix_rewards_dedupe_memo_and_disk_cache(tmp_path):
    from prbench.downstream.prefix_rewards import PrefixRewards

    rm = RecordingRM(letters("e"))
    cache = Cache(tmp_path / "c.sqlite", namespace="scores")
    pr = PrefixRewards(rm, cache, batch_size=2)
    v = _view()
    assert pr([(v, "e"), (v, "ee"), (v, "e"), (v, "eee")]) == [1.0, 2.0, 1.0, 3.0]
    assert rm.texts == ["e", "ee", "eee"] and rm.calls == 2
    pr([(v, "ee")])
    assert rm.calls == 2 and pr.stats.memo_hits == 1
    fresh = PrefixRewards(rm, cache)
    assert fresh([(v, "eee"), (v, "e")]) == [3.0, 1.0]
    assert rm.calls == 2 and fresh.stats.cache_hits == 2
    # the same key as `prbench eval`: a full answer scored here is an eval cache hit
    from prbench.evaluation.scoring import score_cached

    assert score_cached(rm, [(v, "ee")], cache)[0].value == 2.0 and rm.calls == 2


# -- running over data ---------------------------------------------------------------------------
def test_run_rgd_stores_resumes_scores_gold_and_writes_downstream(tiny_engine, tmp_path):
    from prbench.capabilities.rgd.driver import run_rgd
    from prbench.downstream.results import read_downstream
    from prbench.downstream.sampling import policy_messages, read_samples
    from prbench.prompts import load_prompt

    exs = make_examples(3)
    cache = Cache(tmp_path / "c.sqlite", namespace="scores")
    rm = RecordingRM(letters("e"))
    kw = {"condition": "oracle", "k": 5, "max_new_tokens": 12, "top_k": 2, "encoder": None, "n_boot": 50,
          "cache": cache, "repetition_penalty": 1.0}
    res = run_rgd(tiny_engine, rm, exs, tmp_path / "out", w=2.0, **kw)
    assert res.path is not None and (res.path / "samples.jsonl").is_file()
    ss = read_samples(res.path)
    assert set(ss.samples) == {e.id for e in exs} and ss.n == 1
    s = res.summary  # the model its readers validate; `written` is summary.json's object
    assert isinstance(s, GenerationSummary) and res.written == json.loads((res.path / "summary.json").read_text())
    assert s.n_generated == 3 and res.written["gold"]["n_scored"] == 3 and res.written["downstream_metric"] == "rouge1"
    d = read_downstream(res.path)
    assert d.setting == "rgd" and d.rm == "test:recording" and d.k == [1] and d.n_items == 3
    assert d.grader == "gold:rouge1" and d.extra["w"] == 2.0
    calls = rm.calls
    again = run_rgd(tiny_engine, rm, exs, tmp_path / "out", w=2.0, **kw)
    assert rm.calls == calls and again.summary.resumed_from == 3 and again.texts == res.texts

    # w = 0: the plain policy on the same prompt as `engine.generate`, and no downstream.json
    plain = run_rgd(tiny_engine, rm, exs, tmp_path / "out", w=0.0, **kw)
    assert not (plain.path / "downstream.json").exists() and plain.written["downstream"] is None
    from prbench.context.conditions import build_view
    from prbench.context.retrieval import load_retriever

    prompt = load_prompt("policy_answer")
    msgs = [policy_messages(build_view(e, "profile", retriever=load_retriever("bm25"), top_k=2), prompt, 100)
            for e in exs]
    ref = tiny_engine.generate(msgs, GenParams(max_new_tokens=12, repetition_penalty=1.0))
    assert [plain.texts[e.id] for e in exs] == [g.text.strip() for g in ref]


def test_policy_never_sees_the_rubric(tiny_engine):
    from prbench.capabilities.rgd.driver import run_rgd
    from prbench.errors import PrbenchError

    with pytest.raises(PrbenchError, match="rubric"):
        run_rgd(tiny_engine, RecordingRM(letters("e")), make_examples(1), policy_condition="oracle", encoder=None)


def test_cli_rgd_policy_accuracy_icl(tiny_engine, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from prbench.cli import command_app
    from prbench.data import write_examples

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data.jsonl"
    write_examples(make_examples(2), data)
    app = command_app("rgd", "policy-accuracy", "icl")
    policy = f"hf:{tiny_engine.model_id}"
    runner = CliRunner()
    r = runner.invoke(app, ["rgd", "--policy", policy, "--rm", "baseline:length", "--data", str(data), "--w", "0,1",
                            "--k", "3", "--max-new-tokens", "6", "--encoder", "none", "--out", str(tmp_path / "o"),
                            "--json", "--n-boot", "20"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [s["w"] for s in out] == [0.0, 1.0] and all(s["n_generated"] == 2 for s in out)
    r = runner.invoke(app, ["policy-accuracy", "--policy", policy, "--rm", "baseline:length", "--data", str(data),
                            "--w", "0", "--k", "3", "--out", str(tmp_path / "o"), "--json", "--n-boot", "20"])
    assert r.exit_code == 0, r.output
    pa = json.loads(r.stdout)[0]
    assert pa["policy_accuracy"] == pa["plain_policy_accuracy"]
    r = runner.invoke(app, ["icl", "--policy", policy, "--data", str(data), "--max-new-tokens", "6", "--encoder",
                            "none", "--out", str(tmp_path / "o"), "--json", "--n-boot", "20"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["example_kinds"] == {"posts": 2}  # one item per user: no past answers


# -- ICL ------------------------------------------------------------------------------------------
def test_icl_pairs_come_from_the_same_user_and_never_the_item():
    from prbench.capabilities.icl.driver import qa_pairs
    from prbench.context.retrieval import load_retriever

    exs = make_examples(5)  # users u0: ex-0, ex-2, ex-4; u1: ex-1, ex-3
    pairs, source, ids = qa_pairs(exs[0], exs, load_retriever("bm25"), 5)
    assert source == "same-user items" and sorted(ids) == ["ex-2", "ex-4"]
    assert all(a != exs[0].gold_answer for _, a in pairs)
    # profile posts that carry an answer win over sibling items
    item = exs[1].model_copy(update={"profile": [ProfilePost(id="q1", text="Old question?", answer="My old answer.")]})
    pairs, source, ids = qa_pairs(item, exs, load_retriever("bm25"), 3)
    assert pairs == [("Old question?", "My old answer.")] and source == "profile"


def test_run_icl_few_shot_and_posts(tiny_engine, tmp_path):
    from prbench.capabilities.icl.driver import run_icl
    from prbench.downstream.sampling import read_samples

    exs = make_examples(4)
    res = run_icl(tiny_engine, exs, tmp_path / "icl", max_new_tokens=8, encoder=None, n_boot=20,
                  repetition_penalty=1.0)
    assert res.summary.example_kinds == {"qa": 4} and res.written["gold"]["n_scored"] == 4
    assert not (res.path / "downstream.json").exists()
    assert set(read_samples(res.path).samples) == {e.id for e in exs}
    posts = run_icl(tiny_engine, exs, tmp_path / "icl", examples="posts", max_new_tokens=8, encoder=None,
                    n_boot=20, repetition_penalty=1.0, top_k=2)
    assert posts.summary.example_kinds == {"posts": 4}
    # posts mode is the plain policy prompt: the same text RGD at w = 0 decodes
    from prbench.capabilities.rgd.driver import run_rgd

    plain = run_rgd(tiny_engine, RecordingRM(letters("e")), exs, w=0.0, max_new_tokens=8, top_k=2, encoder=None,
                    repetition_penalty=1.0, n_boot=20)
    assert plain.texts == posts.texts


# -- the real policy (slow) -----------------------------------------------------------------------
@pytest.mark.slow
def test_rgd_smollm2_two_rms():
    from prbench.capabilities.rgd.driver import run_rgd
    from prbench.context.conditions import build_view
    from prbench.context.retrieval import load_retriever
    from prbench.data import load_examples
    from prbench.downstream.sampling import policy_messages
    from prbench.engines.builtin import builtin_engine
    from prbench.prompts import load_prompt

    engine = builtin_engine("smollm2-135m-instruct")  # make test installs it: missing is a failure
    items = load_examples("sample", limit=2)
    kw = {"condition": "oracle", "k": 5, "max_new_tokens": 24, "top_k": 3, "encoder": None, "n_boot": 50}
    plain = run_rgd(engine, "baseline:embedding", items, w=0.0, **kw)
    msgs = [policy_messages(build_view(it, "profile", retriever=load_retriever("bm25"), top_k=3),
                            load_prompt("policy_answer"), 100) for it in items]
    ref = engine.generate(msgs, GenParams(max_new_tokens=24, repetition_penalty=1.3))
    assert [plain.texts[it.id] for it in items] == [g.text.strip() for g in ref]
    assert plain.written["repetition_penalty"] == 1.3
    for rm in ("baseline:embedding", "baseline:lexical"):
        guided = run_rgd(engine, rm, items, w=3.0, reward_norm="zscore", **kw)
        assert guided.written["rewards"]["rm_texts"] > 0
        assert guided.texts != plain.texts, rm
        assert guided.written["gold"]["n_scored"] == 2


def test_rubric_grader_feeds_downstream(tiny_engine, tmp_path):
    from prbench.capabilities.rgd.driver import run_rgd
    from prbench.downstream.grader import RubricGrader
    from prbench.downstream.results import read_downstream
    from prbench.engines.base import Engine, Generation

    class FixedGrader(Engine):
        spec = "test:grader"

        def generate(self, prompts, params):
            return [Generation(text='{"grades": [{"aspect": 1, "score": 2}]}') for _ in prompts]

    grader = RubricGrader(engine=FixedGrader())
    res = run_rgd(tiny_engine, RecordingRM(letters("e")), make_examples(2), tmp_path / "g", w=1.0, k=3,
                  max_new_tokens=6, top_k=1, encoder=None, n_boot=20, grader=grader, repetition_penalty=1.0)
    assert res.summary.grade is not None and res.summary.grade.mean == 2.0 and res.written["downstream_metric"] == "grade"
    d = read_downstream(res.path)
    assert d.grader == "test:grader" and d.scale == "mean aspect grade, 0-2" and d.expected == [2.0]
    assert d.extra["metric"] == "grade"
