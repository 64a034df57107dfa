"""Best-of-N end to end: policy samples once, RMs score, each distinct sample graded once, exact curves."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from prbench.capabilities.bon.driver import best_of_n, k_values
from prbench.capabilities.sample.driver import sample_policy
from prbench.downstream.grader import RubricGrader
from prbench.downstream.results import DownstreamResult, read_downstream, write_downstream
from prbench.downstream.sampling import read_samples
from prbench.engines.base import Engine, Generation, GenParams, Messages
from prbench.errors import PrbenchError
from prbench.schema import Example
from prbench.store.records import BonRunSummary
from prbench.testing.records import make_record

ANSWER = re.compile(r"<<<ANSWER\n(.*)\nANSWER>>>", re.DOTALL)


def short_items(n: int = 4) -> list[Example]:
    """Items with short profiles: the tiny byte-level policy reads one token per byte."""
    out = []
    for i in range(n):
        rec = make_record(i)
        rec["profile"] = rec["profile"][:3]
        out.append(Example.model_validate(rec))
    return out


def grade_of_text(text: str, n_aspects: int) -> list[int]:
    """A deterministic 'grader opinion' of an answer (so tests know every grade)."""
    h = hashlib.sha256(text.encode()).digest()
    return [h[j] % 3 for j in range(n_aspects)]


def grading_reply(prompt: str) -> str:
    answer = ANSWER.search(prompt).group(1)
    n = int(re.search(r"expects \((\d+) aspects\)", prompt).group(1))
    return json.dumps({"grades": [{"aspect": j + 1, "score": s} for j, s in enumerate(grade_of_text(answer, n))]})


class ScriptedGrader(Engine):
    spec = "scripted:grader"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompts: Sequence[Messages], params: GenParams | Sequence[GenParams]) -> list[Generation]:
        self.calls += len(prompts)
        return [Generation(text=grading_reply(p[-1]["content"])) for p in prompts]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from prbench.testing.tiny import make_tiny_causal_lm, make_tiny_seq_classifier

    root = tmp_path_factory.mktemp("models")
    return {"lm": make_tiny_causal_lm(root / "lm", seed=1), "rm": make_tiny_seq_classifier(root / "rm", seed=2)}


@pytest.fixture(scope="module")
def tiny_samples(models, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("samples") / "s"
    sample_policy(f"hf:{models['lm']}", short_items(4), out, n=6, top_k=2, max_new_tokens=12, seed=7,
                  engine_options={"device": "cpu"})
    return out


# -- pure pieces --------------------------------------------------------------------------------
def test_k_values() -> None:
    assert k_values(16) == [1, 2, 4, 8, 16]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(1) == [1]


def brute_force_best_of_k(r: np.ndarray, g: np.ndarray, k: int) -> float:
    """Average over every k-subset of the grade of its top-RM pick, ties split evenly."""
    vals = []
    for sub in itertools.combinations(range(len(r)), k):
        best = max(r[i] for i in sub)
        tied = [g[i] for i in sub if r[i] == best]
        vals.append(sum(tied) / len(tied))
    return float(np.mean(vals))


# -- sampling ---------------------------------------------------------------------------------
def test_samples_seeded_resumable_and_batch_invariant(models, tiny_samples, tmp_path) -> None:
    ss = read_samples(tiny_samples)
    assert len(ss.items) == 4 and all(len(v) == 6 for v in ss.samples.values())
    lines = (tiny_samples / "samples.jsonl").read_text().splitlines()
    seeds = [s["seed"] for s in json.loads(lines[0])["samples"]]
    assert len(set(seeds)) == 6
    # a fresh folder, another batch size, and a crash after two items: same samples after resume
    other = tmp_path / "again"
    sample_policy(f"hf:{models['lm']}", short_items(2), other, n=6, top_k=2, max_new_tokens=12, seed=7,
                  batch_size=3, engine_options={"device": "cpu"}, limit=None)
    with (other / "samples.jsonl").open("a") as fh:
        fh.write('{"id": "ex-002", "trunc')  # a half-written line from a crash
    with pytest.raises(PrbenchError, match="different config"):
        sample_policy(f"hf:{models['lm']}", short_items(4), other, n=5, top_k=2, max_new_tokens=12, seed=7,
                      engine_options={"device": "cpu"})
    again = sample_policy(f"hf:{models['lm']}", short_items(4), other, n=6, top_k=2, max_new_tokens=12, seed=7,
                          batch_size=3, engine_options={"device": "cpu"})
    assert again.samples == ss.samples
    summary = json.loads((other / "summary.json").read_text())
    assert summary["resumed_from"] == 2 and summary["complete_items"] == 4


def test_policy_never_sees_rubric(models, tmp_path) -> None:
    with pytest.raises(PrbenchError, match="rubric"):
        sample_policy(f"hf:{models['lm']}", short_items(1), tmp_path / "x", n=1, condition="oracle")


# -- Best-of-N ----------------------------------------------------------------------------------
def test_bon_exact_expectation_matches_brute_force(models, tiny_samples, tmp_path) -> None:
    grader = RubricGrader(engine=ScriptedGrader())
    rms = ["baseline:length", f"hf:{models['rm']}", "baseline:random"]
    res = best_of_n(tiny_samples, rms, grader, condition="profile", out=tmp_path / "bon", top_k=2, n_boot=200,
                    rm_options={"device": "cpu"})
    ks = [1, 2, 4, 6]
    assert res.summary.k == ks
    grades = {json.loads(line)["id"]: np.array(json.loads(line)["grades"], dtype=float)
              for line in (tmp_path / "bon" / "grades.jsonl").read_text().splitlines()}
    ss = read_samples(tiny_samples)
    for item in ss.items:  # grades are the scripted grader's opinion of each stored sample
        expect = [np.mean(grade_of_text(t, len(item.rubric_aspects))) for t in ss.samples[item.id]]
        assert grades[item.id] == pytest.approx(expect)
    for spec in rms:
        name = "baseline:length" if spec == "baseline:length" else spec
        result = res.results[name]
        folder = next(p for p in (tmp_path / "bon").iterdir() if p.is_dir() and (p / "downstream.json").exists()
                      and read_downstream(p).rm == name)
        scores = {json.loads(line)["id"]: np.array(json.loads(line)["scores"], dtype=float)
                  for line in (folder / "scores.jsonl").read_text().splitlines()}
        assert result.n_items == 4 and result.k == ks
        for item_id, per_k in result.per_item.items():
            r, g = scores[item_id], grades[item_id]
            for k in ks:
                assert per_k[str(k)] == pytest.approx(brute_force_best_of_k(r, g, k), abs=1e-12)
                first = result.extra["per_item_first_k"][item_id][str(k)]
                assert first == g[int(np.argmax(r[:k]))]
        for j, k in enumerate(ks):
            assert result.expected[j] == pytest.approx(np.mean([v[str(k)] for v in result.per_item.values()]))
            assert result.ci_low[j] <= result.expected[j] <= result.ci_high[j]
            oracle_brute = np.mean([brute_force_best_of_k(grades[i], grades[i], k) for i in grades])
            assert result.extra["oracle"][j] == pytest.approx(oracle_brute)
            assert result.extra["random"][j] == pytest.approx(np.mean([grades[i].mean() for i in grades]))
        # at k = N both pick from the full set: equal wherever the top score is unique
        for item_id in result.per_item:
            r = scores[item_id]
            if np.sum(r == r.max()) == 1:
                assert result.per_item[item_id]["6"] == result.extra["per_item_first_k"][item_id]["6"]
    # every distinct sample graded once, versus one grading per (RM, k, item) pick
    assert isinstance(res.summary, BonRunSummary)
    assert res.written == json.loads((tmp_path / "bon" / "bon.json").read_text())  # the file as the driver wrote it
    calls = res.summary.grader_calls
    assert calls.made == res.summary.distinct_samples <= 4 * 6
    assert calls.naive == len(rms) * len(ks) * 4
    csv_text = (tmp_path / "bon" / "curves.csv").read_text()
    assert csv_text.startswith("rm,k,first_k,expected") and "<oracle>" in csv_text


def test_bon_second_rm_needs_no_new_grading(tiny_samples, tmp_path) -> None:
    from prbench.store.cache import Cache

    engine = ScriptedGrader()
    first = best_of_n(tiny_samples, ["baseline:length"], RubricGrader(engine=engine, cache=Cache(namespace="grades")),
                      out=tmp_path / "a", n_boot=50)
    assert engine.calls == first.summary.distinct_samples > 0
    again = ScriptedGrader()  # a new process: same grader fingerprint, persistent cache
    res = best_of_n(tiny_samples, ["baseline:short", "baseline:random"],
                    RubricGrader(engine=again, cache=Cache(namespace="grades")), out=tmp_path / "b", n_boot=50)
    assert again.calls == 0 and res.summary.grader.cache_hits == res.summary.distinct_samples


def test_invalid_grades_and_scores_excluded_not_zeroed(tiny_samples, tmp_path) -> None:
    class HalfBroken(ScriptedGrader):
        def generate(self, prompts, params):
            out = super().generate(prompts, params)
            for p, g in zip(prompts, out):
                if "(item 1)" in p[-1]["content"]:
                    g.text = "no idea"
            return out

    res = best_of_n(tiny_samples, ["baseline:length"], RubricGrader(engine=HalfBroken()), n_boot=50)
    r = res.results["baseline:length"]
    assert r.n_items == 3 and "ex-001" not in r.per_item
    assert r.extra["n_excluded"]["invalid_grade"] == 1
    assert res.summary.grader.parse_failures > 0


def test_pairwise_rm_refused(tiny_samples) -> None:
    from prbench.rewards.base import PairwiseRM

    class Pairwise(PairwiseRM):
        spec = "test:pairwise"

        def compare(self, batch):
            return []

    with pytest.raises(PrbenchError, match="pointwise"):
        best_of_n(tiny_samples, [Pairwise()], RubricGrader(engine=ScriptedGrader()), n_boot=10)


# -- results file -----------------------------------------------------------------------------
def test_downstream_roundtrip_and_validation(tmp_path) -> None:
    res = DownstreamResult(rm="baseline:length", setting="bon", k=[1, 2], first_k=[1.0, 1.5], expected=[1.0, 1.25],
                           ci_low=[0.5, 0.75], ci_high=[1.5, 1.75], per_item={"a": {"1": 1.0, "2": 1.25}},
                           grader="openai:x", n_items=1, extra={"condition": "none"})
    path = write_downstream(tmp_path / "run", res)
    assert path.name == "downstream.json"
    back = read_downstream(tmp_path / "run")
    assert back.to_dict() == res.to_dict() and back.value_at() == 1.25 and back.item_values(1) == {"a": 1.0}
    bad = res.to_dict()
    bad["expected"] = [1.0, float("nan")]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PrbenchError, match="expected"):
        read_downstream(tmp_path / "bad.json")
    bad = {**res.to_dict(), "setting": "ppo"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PrbenchError, match="setting"):
        read_downstream(tmp_path / "bad.json")
    bad = {**res.to_dict(), "n_items": 2}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PrbenchError, match="n_items"):
        read_downstream(tmp_path / "bad.json")


# -- the commands, over real HTTP: a loopback policy and a loopback grader ------------------------
CANNED = ("Go hiking, cheaply.", "Stay home and rest this weekend, it costs nothing.",
          "Plan a cheap and relaxed morning around your hobby, then rest on Sunday.")


def policy_reply(body: dict) -> str:
    return CANNED[int(body["seed"]) % 3]  # few distinct answers: duplicates across samples


def grader_reply(body: dict) -> str:
    return grading_reply(body["messages"][-1]["content"])


def cli_app():
    from prbench.cli import command_app

    return command_app("sample", "bon", "rl", "serve-reward")


def test_cli_sample_and_bon_grade_each_distinct_answer_once(models, tmp_path) -> None:
    from typer.testing import CliRunner

    from prbench.data import write_examples
    from prbench.testing.openai_server import serve

    data = tmp_path / "items.jsonl"
    write_examples(short_items(3), data)
    samples = tmp_path / "samples"
    app, runner = cli_app(), CliRunner()
    with serve(policy_reply) as pol, serve(grader_reply) as gra:
        args = ["sample", "--policy", "openai:policy", "--base-url", pol.base_url, "--data", str(data), "--n", "8",
                "--out", str(samples), "--top-k", "2", "--quiet"]
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        assert len(pol.requests) == 3 * 8
        assert {round(b["temperature"], 3) for b in pol.requests} == {1.0} and {b["top_p"] for b in pol.requests} == {0.9}
        assert runner.invoke(app, args).exit_code == 0 and len(pol.requests) == 3 * 8  # resumed: nothing redrawn
        ss = read_samples(samples)
        distinct = sum(len(set(texts)) for texts in ss.samples.values())
        assert distinct <= 3 * 3 < 3 * 8

        rms = ["baseline:length", f"hf:{models['rm']}", "baseline:lexical"]
        bon_args = ["bon", "--samples", str(samples), *[x for rm in rms for x in ("--rm", rm)], "--grader",
                    "openai:grader", "--grader-base-url", gra.base_url, "--condition", "profile", "--top-k", "2",
                    "--n-boot", "100", "--json"]
        r = runner.invoke(app, bon_args)
        assert r.exit_code == 0, r.output
        summary = json.loads(r.stdout)
        # identical answers, all RMs, all k: one grader request per distinct answer
        assert len(gra.requests) == distinct == summary["grader_calls"]["made"]
        assert summary["grader_calls"]["naive"] == len(rms) * len([1, 2, 4, 8]) * 3
        assert summary["k"] == [1, 2, 4, 8] and len(summary["rms"]) == 3
        for row in summary["rms"]:
            d = read_downstream(Path(summary["path"]) / next(
                p.name for p in Path(summary["path"]).iterdir() if p.is_dir() and read_downstream(p).rm == row["rm"]))
            assert d.n_items == 3 and d.setting == "bon" and d.grader == "openai:grader"
        # another RM later: every grade comes from the cache
        r = runner.invoke(app, ["bon", "--samples", str(samples), "--rm", "baseline:random", "--grader", "openai:grader",
                                "--grader-base-url", gra.base_url, "--out", str(tmp_path / "bon2"), "--n-boot", "50",
                                "--quiet"])
        assert r.exit_code == 0, r.output
        assert len(gra.requests) == distinct
        assert (tmp_path / "bon2" / "curves.csv").exists()


def test_cli_api_and_study_share_one_sample_config(tmp_path, capsys) -> None:
    """`prbench sample`, `sample_policy` and a study's `sample` section build the same SampleSettings:
    the same config.json (one default per option: max_new_tokens and batch_size are left unset) and the
    same samples; the study's seed, limit and top_k fill its section."""
    import yaml

    from prbench.data import write_examples
    from prbench.study.config import load_study_config
    from prbench.study.runner import plan_study, run_study
    from prbench.testing.cli import run_cli
    from prbench.testing.openai_server import serve

    data = tmp_path / "items.jsonl"
    write_examples(short_items(3), data)
    own = {"n": 3, "temperature": 0.7, "top_p": 0.8, "max_words": 40,
           "categories": ["Art_and_Entertainment", "Lifestyle_and_Personal_Development"]}
    shared = {"seed": 5, "top_k": 2, "limit": 2}
    flags = [f"--{k.replace('_', '-')}={','.join(v) if isinstance(v, list) else v}" for k, v in {**own, **shared}.items()]
    with serve(policy_reply) as pol:
        code, _, err = run_cli(capsys, "sample", "--policy", "openai:policy", "--base-url", pol.base_url, "-d", str(data),
                               "-o", str(tmp_path / "cli"), "--quiet", *flags)
        assert code == 0, err
        cli_cfg = json.loads((tmp_path / "cli" / "config.json").read_text())
        assert cli_cfg["max_new_tokens"] == 200 and cli_cfg["n"] == 3 and cli_cfg["seed"] == 5
        assert cli_cfg["categories"] == own["categories"] and cli_cfg["condition"] == "profile"
        assert len(pol.requests) == 2 * 3 and {b["max_tokens"] for b in pol.requests} == {200}

        sample_policy("openai:policy", str(data), tmp_path / "api", engine_options={"base_url": pol.base_url},
                      **own, **shared)
        assert json.loads((tmp_path / "api" / "config.json").read_text()) == cli_cfg

        study = {"name": "s", "data": str(data), "out": str(tmp_path / "study"), "stages": ["sample"],
                 "models": [{"spec": "baseline:length"}], **shared,
                 "sample": {"policy": "openai:policy", "options": {"base_url": pol.base_url}, **own}}
        (tmp_path / "study.yaml").write_text(yaml.safe_dump(study), encoding="utf-8")
        cfg, root = load_study_config(tmp_path / "study.yaml")
        assert [(p.stage, p.model_calls) for p in plan_study(cfg, root)] == [("sample", 2 * 3)]  # limit x n
        run_study(cfg, root, quiet=True)
    (study_run,) = (tmp_path / "study" / "runs" / "downstream" / "samples").glob("*/config.json")
    assert json.loads(study_run.read_text()) == cli_cfg  # one default per option, everywhere
    records = [(d / "samples.jsonl").read_bytes() for d in (tmp_path / "cli", tmp_path / "api", study_run.parent)]
    assert records[0] and records[0] == records[1] == records[2]
    with pytest.raises(PrbenchError, match="n: "):
        sample_policy("openai:policy", str(data), tmp_path / "x", n=5000)
    with pytest.raises(PrbenchError, match="did you mean 'top_k'"):
        sample_policy("openai:policy", str(data), tmp_path / "x", topk=2)


def test_bon_api_grader_priced_capped_and_resumed(tiny_samples, fake_openai, api_key_env, tmp_path) -> None:
    from prbench import cost
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache

    srv = fake_openai(lambda body: grading_reply(body["messages"][-1]["content"]))

    def grader():
        return load_grader("openai:gpt-4.1-mini", cache=Cache(namespace="grades"),
                           engine_options={"base_url": srv.base_url, "api_key_env": api_key_env[0], "concurrency": 1})

    with pytest.raises(cost.BudgetExceeded):
        best_of_n(tiny_samples, ["baseline:length"], grader(), out=tmp_path / "b", n_boot=20, max_usd=0.0015)
    stopped_at = srv.n_posts
    assert 0 < stopped_at
    res = best_of_n(tiny_samples, ["baseline:length"], grader(), out=tmp_path / "b", n_boot=20, max_usd=1.0)
    c = res.written["cost"]
    assert srv.n_posts == res.summary.distinct_samples  # graded once each: the stop paid nothing twice
    assert c["requests"] == srv.n_posts and c["usd"] > 0 and c["priced_as"] == "openai:gpt-4.1-mini"  # both runs


def test_bon_grades_through_batches_like_synchronous(tiny_samples, api_key_env, tmp_path, monkeypatch) -> None:
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache
    from prbench.testing.batch_server import serve_batches

    monkeypatch.setenv("PRBENCH_BATCH_POLL", "0.05,0.2")
    with serve_batches("openai", lambda body: grading_reply(body["messages"][-1]["content"]),
                       provider="openai") as srv:
        def run(out: str, **kw):
            g = load_grader("openai:gpt-4.1-mini", cache=Cache(tmp_path / f"{out}.sqlite", namespace="grades"),
                            engine_options={"base_url": srv.base_url, "api_key_env": api_key_env[0]})
            return best_of_n(tiny_samples, ["baseline:length"], g, out=tmp_path / out, n_boot=20, **kw)

        sync = run("sync")
        n_sync = srv.n_posts
        res = run("batch", batch=True)
        assert len(srv.batches) == 1 and not srv.refused
        assert {r.path for r in srv.records[n_sync:] if r.method == "POST"} == {"/v1/files", "/v1/batches"}
    strip = ("wall_time_s", "cost", "grader")
    assert {k: v for k, v in res.written.items() if k not in strip} == {k: v for k, v in sync.written.items()
                                                                          if k not in strip}
    assert res.summary.grader.calls == sync.summary.grader.calls  # the collecting pass is not counted
    assert (tmp_path / "batch" / "grades.jsonl").read_text() == (tmp_path / "sync" / "grades.jsonl").read_text()
    assert res.summary.cost is not None and res.summary.cost.batch is True
