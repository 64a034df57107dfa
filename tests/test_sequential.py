"""prbench.evaluation.sequential: confidence sequences, the seeded order, the stopping rules, and `--until` on real runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prbench import evaluate
from prbench.errors import PrbenchError
from prbench.evaluation.sequential import (
    StopRule,
    comparison_pairs,
    confidence_sequence,
    item_rank,
    record_outcome,
    run_until,
    schedule,
    seeded_prefix,
)
from prbench.testing.records import make_records


def test_coverage_at_every_time_without_replacement() -> None:
    """500 random orders of one fixed population: the running CS covers its mean at every prefix length in
    at least 95% of orders (a fixed-n CI peeked at every step would not)."""
    rng = np.random.default_rng(0)
    pop = (rng.random(400) < 0.62).astype(float)
    mu = pop.mean()
    miss = 0
    for _ in range(500):
        lo, hi = confidence_sequence(rng.permutation(pop), population=len(pop), grid=400)
        miss += bool(np.any((lo > mu) | (hi < mu)))
    assert miss / 500 <= 0.05


def test_naive_interval_peeked_at_every_step_undercovers() -> None:
    """The control: a fixed-n 95% normal interval looked at after every item misses far more often."""
    rng = np.random.default_rng(1)
    miss = 0
    for _ in range(300):
        x = (rng.random(400) < 0.6).astype(float)
        t = np.arange(1, 401)
        m = np.cumsum(x) / t
        half = 1.96 * np.sqrt(np.maximum(m * (1 - m), 1e-9) / t)
        miss += bool(np.any((m[20:] - half[20:] > 0.6) | (m[20:] + half[20:] < 0.6)))
    assert miss / 300 > 0.15


def test_sequence_shrinks_to_the_population_mean() -> None:
    x = np.array([1.0, 0.0, 1.0, 1.0, 0.5] * 60)
    lo, hi = confidence_sequence(x, population=len(x))
    assert lo[-1] <= x.mean() <= hi[-1] and hi[-1] - lo[-1] < 0.01  # every item seen: the mean itself
    lo_iid, hi_iid = confidence_sequence(x)
    assert hi_iid[-1] - lo_iid[-1] > 0.1  # independent draws: no such shortcut
    assert np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) <= 0)  # running intersection
    with pytest.raises(PrbenchError, match=r"\[0, 1\]"):
        confidence_sequence([1.5])
    with pytest.raises(PrbenchError, match="population"):
        confidence_sequence([1.0, 0.0], population=1)


def test_seeded_order_is_a_hash_order_and_keeps_items_whole() -> None:
    keys = [(f"p{i}", f"item{i // 2}") for i in range(20)]  # ten items of two pairs each
    n_all, order = seeded_prefix(keys, seed=3, limit=4)
    assert n_all == 10 and len(order) == 8
    kept = {k for rid, k in keys if rid in order}
    assert len(kept) == 4
    expected = sorted({k for _, k in keys}, key=lambda k: item_rank(3, k))[:4]
    assert kept == set(expected)
    assert item_rank(3, "item0") == int.from_bytes(hashlib.sha256(b"3\0item0").digest()[:8], "big")
    _, longer = seeded_prefix(keys, seed=3, limit=6)
    assert all(longer[rid] == place for rid, place in order.items())  # a longer limit extends, never reorders
    _, full = seeded_prefix(keys, seed=3, limit=None)
    _, sub = seeded_prefix(keys[:10], seed=3, limit=None)  # fewer items: the others keep their relative order
    assert [r for r in sorted(full, key=full.get) if r in sub] == sorted(sub, key=sub.get)


@pytest.mark.parametrize("text,kind,value", [("ci=0.03", "ci", 0.03), ("decided", "decided", 0.02),
                                             ("decided=0.05", "decided", 0.05), (" ci = .1 ", "ci", 0.1)])
def test_rule_parses(text: str, kind: str, value: float) -> None:
    rule = StopRule.parse(text)
    assert (rule.kind, rule.value) == (kind, value)


@pytest.mark.parametrize("text", ["ci", "ci=0", "ci=1.5", "soon", "decided=x", "ci=-0.1"])
def test_rule_refused(text: str) -> None:
    with pytest.raises(PrbenchError, match="--until"):
        StopRule.parse(text)


def test_schedule_and_pairs() -> None:
    assert schedule(300) == [100, 111, 123, 136, 150, 165, 182, 201, 222, 245, 270, 297, 300]
    assert schedule(40) == [40]
    labels = [("a", "none"), ("b", "none"), ("a", "profile"), ("b", "profile")]
    assert comparison_pairs(labels) == [(0, 1), (2, 3)]  # models within a condition
    assert comparison_pairs([("a", "none"), ("a", "profile"), ("a", "oracle")]) == [(0, 1), (0, 2), (1, 2)]


# -- on the stand-in judges ------------------------------------------------------------------------
ACCURACY = {"sharp": 0.92, "coin": 0.55, "coin2": 0.57}


def _last_user(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def _judge_reply(body: dict[str, Any]) -> str:
    """A judge that picks the planted chosen response (it starts 'Spend Saturday') on a share of items given by
    its model name, decided per item by a hash of the prompt's question, so both orders agree."""
    prompt = _last_user(body)
    a_start = prompt.split("<response_a>\n", 1)[1][:14]
    chosen_is_a = a_start.startswith("Spend Saturday")
    item = prompt.split("(item ", 1)[1].split(")", 1)[0]
    h = int(hashlib.sha256(f"{body['model']}:{item}".encode()).hexdigest()[:8], 16) / 16**8
    right = h < ACCURACY[body["model"]]
    return f"Result: {'A' if chosen_is_a == right else 'B'}"


@pytest.fixture()
def judges(fake_openai, api_key_env: tuple[str, str], tmp_path: Path) -> tuple[str, dict[str, Any]]:
    srv = fake_openai(_judge_reply)
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(500)), encoding="utf-8")
    return str(data), {"base_url": srv.base_url, "api_key_env": api_key_env[0]}


def _until(data: str, opts: dict[str, Any], out: Path, rule: str, until_max: int | None = None) -> Any:
    labels = [("judge:openai:sharp", "none"), ("judge:openai:coin", "none")]

    def at(i: int, n: int) -> Any:
        return evaluate(labels[i][0], data, "none", out=out, model_options=opts, seeded_order=True, limit=n,
                        n_boot=50)

    return run_until(labels, at, StopRule.parse(rule), until_max=until_max)


def test_clearly_different_judges_stop_early_and_say_why(judges, tmp_path: Path) -> None:
    data, opts = judges
    out = tmp_path / "runs"
    first = _until(data, opts, out, "decided")
    assert first.n_used < 500 and first.met
    assert "decided=0.02 met at" in first.stopped and "judge:openai:sharp [none] > judge:openai:coin [none]" \
        in first.stopped
    summaries = record_outcome(first)
    stored = json.loads((first.results[0].path / "summary.json").read_text())
    assert stored["sequential"]["n_used"] == first.n_used == summaries[0]["sequential"]["n_used"]
    assert stored["sequential"]["rule"] == "decided=0.02" and stored["order"]["n_items"] == 500
    recs = [json.loads(line) for line in (first.results[0].path / "examples.jsonl").read_text().splitlines()]
    ranks = [item_rank(0, r["id"]) for r in recs]
    assert len(recs) == first.n_used and ranks == sorted(ranks)  # the run is a prefix of the seeded order
    assert max(ranks) < min(item_rank(0, r["id"]) for r in make_records(500) if r["id"] not in {x["id"] for x in recs})

    # a tighter rule extends the same folders; the items already scored are not asked again
    n_before = first.n_used
    tighter = _until(data, opts, out, "ci=0.04")
    assert tighter.results[0].path == first.results[0].path
    sharp, coin = tighter.stop_of(0), tighter.stop_of(1)
    assert n_before < sharp.n_used < coin.n_used  # under ci= each run stops on its own: the sharper judge first
    recs2 = [json.loads(line) for line in (first.results[0].path / "examples.jsonl").read_text().splitlines()]
    assert recs2[:n_before] == recs and len(recs2) == sharp.n_used
    assert "ci=0.04 met at" in sharp.stopped

    # the looser rule again: read from the folder, nothing scored, stops where it stopped before
    again = _until(data, opts, out, "decided")
    assert again.n_used == n_before and all(r.reused for r in again.results)


def test_a_judge_settled_against_every_other_stops_while_two_close_ones_go_on(judges, tmp_path: Path) -> None:
    """Racing: `decided` retires a run once every pair it is in is settled, so the sharp judge is not called while
    the two near-coin judges (a few points apart) are still being told apart."""
    data, opts = judges
    labels = [("judge:openai:sharp", "none"), ("judge:openai:coin", "none"), ("judge:openai:coin2", "none")]

    def at(i: int, n: int) -> Any:
        return evaluate(labels[i][0], data, "none", out=tmp_path / "runs", model_options=opts, seeded_order=True,
                        limit=n, n_boot=20)

    res = run_until(labels, at, StopRule.parse("decided"), paid=[True] * 3)
    sharp, coin, coin2 = (res.stop_of(i) for i in range(3))
    assert sharp.n_used < coin.n_used == coin2.n_used  # the close pair goes on together, without the sharp judge
    assert sharp.stopped.startswith(f"decided=0.02 met at {sharp.n_used} of 500 items")
    assert "judge:openai:coin2 [none]" in coin.stopped and "judge:openai:sharp [none] >" in coin.stopped
    assert res.family == 3 and res.calls_share < 1
    assert set(res.block(0)["versus"]) == {"judge:openai:coin [none]", "judge:openai:coin2 [none]"}


def test_free_runs_are_scored_first_and_judges_compared_with_their_known_accuracy(judges, tmp_path: Path) -> None:
    """With API judges and models that send no request, the free ones are scored on every item first; a judge
    against one of them needs only its own sequence, so the level is split over fewer sequences."""
    data, opts = judges
    labels = [("judge:openai:sharp", "none"), ("judge:openai:coin", "none"), ("baseline:length", "none"),
              ("baseline:short", "none")]

    def at(i: int, n: int) -> Any:
        return evaluate(labels[i][0], data, "none", out=tmp_path / "runs", model_options=opts if i < 2 else {},
                        seeded_order=True, limit=n, n_boot=20)

    res = run_until(labels, at, StopRule.parse("decided"), paid=[True, True, False, False])
    assert res.family == 1 + 2  # the judges' pair, and each judge's own sequence; the free pair needs none
    assert [res.stop_of(i).n_used for i in (2, 3)] == [500, 500] and res.stop_of(0).n_used < 500
    assert "all 500 items scored first (no API calls" in res.stop_of(2).stopped and res.met
    assert [res.results[i].summary.accuracy for i in (2, 3)] == [0.0, 1.0]  # planted: the shorter one is chosen
    said = res.stop_of(0).stopped
    assert "judge:openai:sharp [none] > baseline:length [none]" in said and "baseline:short [none] > " \
        "judge:openai:sharp [none]" in said
    capped = run_until(labels, at, StopRule.parse("decided"), paid=[True, True, False, False], until_max=300)
    assert capped.family == 6  # under --until-max the free runs are not known in full: every pair has a sequence


def test_until_max_caps_and_says_so(judges, tmp_path: Path) -> None:
    data, opts = judges
    res = _until(data, opts, tmp_path / "runs", "ci=0.001", until_max=130)
    assert res.n_used == 130 and "--until-max 130 reached" in res.stopped and not res.met


def test_seeded_and_plain_runs_never_share_a_folder(judges, tmp_path: Path) -> None:
    data, opts = judges
    out = tmp_path / "runs"
    seeded = evaluate("judge:openai:coin", data, "none", out=out, model_options=opts, seeded_order=True, limit=20,
                      n_boot=20)
    plain = evaluate("judge:openai:coin", data, "none", out=out, model_options=opts, limit=20, n_boot=20)
    assert seeded.path != plain.path and json.loads((seeded.path / "config.json").read_text())["order"] == "seeded"
    assert [r.id for r in plain.records] == [f"ex-{i:03d}" for i in range(20)]  # the plain run: the first 20
    assert [r.id for r in seeded.records] != [r.id for r in plain.records]


def test_cli_until(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.testing.cli import run_cli

    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(300)), encoding="utf-8")
    args = ["eval", "-m", "baseline:length", "-m", "baseline:short", "--data", str(data), "--out",
            str(tmp_path / "runs"), "--n-boot", "20", "--quiet", "--json"]
    code, out, err = run_cli(capsys, *args, "--until", "decided")
    assert code == 0, err
    got = json.loads(out)
    assert [s["sequential"]["rule"] for s in got] == ["decided=0.02"] * 2
    assert got[0]["sequential"]["n_used"] == 60  # planted: length always right, short always wrong; first look 300/5
    code, _, err = run_cli(capsys, *args, "--until", "soon")
    assert code == 2 and "--until 'soon'" in err
    code, _, err = run_cli(capsys, *args, "--until", "decided", "--limit", "50")
    assert code == 2 and "--until-max" in err
    code, _, err = run_cli(capsys, *args, "--until-max", "50")
    assert code == 2 and "--until-max caps a sequential run" in err
    code, out, err = run_cli(capsys, *args[:-2], "--until", "ci=0.2")  # the table, then why each run stopped
    assert code == 0, err
    assert out.count("stopped: ci=0.2 met at 60 of 300 items") == 2


def test_until_is_a_setting_of_evaluate_and_writes_what_the_cli_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`until` is an `EvalSettings` field: `evaluate` runs the race itself from Python (before, only `prbench eval`
    and the study orchestrated it, and `evaluate(..., until=...)` was an unknown option), and its run folders
    are the ones `prbench eval --until` writes, byte for byte but the wall time."""
    from prbench import EvalSettings
    from prbench.testing.cli import run_cli

    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(300)), encoding="utf-8")
    got = evaluate(["baseline:length", "baseline:short"], str(data), ["none", "oracle"], out=tmp_path / "py",
                   until="decided", n_boot=20)
    assert [r.summary["sequential"]["n_used"] for r in got] == [60] * 4
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "-m", "baseline:short", "-c", "none,oracle",
                           "--data", str(data), "--out", str(tmp_path / "cli"), "--n-boot", "20", "--until",
                           "decided", "--quiet")
    assert code == 0, err
    for res in got:
        assert res.path is not None
        twin = tmp_path / "cli" / res.path.relative_to(tmp_path / "py")
        for name in ("config.json", "examples.jsonl", "summary.json"):
            mine, theirs = (json.loads(p.read_text()) if name.endswith(".json") else p.read_text()
                            for p in (res.path / name, twin / name))
            if name == "summary.json":
                for s in (mine, theirs):
                    s.pop("wall_time_s")
            assert mine == theirs, name
    one = evaluate("baseline:length", str(data), "none", settings=EvalSettings(until="ci=0.2", n_boot=20))
    assert one.summary["sequential"]["stopped"].startswith("ci=0.2 met at 60 of 300 items")
    with pytest.raises(PrbenchError, match="cap it with --until-max instead of --limit"):
        evaluate("baseline:length", str(data), until="decided", limit=50)
    with pytest.raises(PrbenchError, match="--until 'soon'"):
        evaluate("baseline:length", str(data), until="soon")


def test_study_eval_stage_until(tmp_path: Path) -> None:
    """A study's `until`: the eval stage stops each condition's models together and records why."""
    from prbench.study.config import load_study_config, parse_study
    from prbench.study.runner import run_study

    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_records(400)), encoding="utf-8")
    (tmp_path / "study.yaml").write_text(
        "name: seq\ndata: bench.jsonl\nout: study-out\nconditions: [none, oracle]\nuntil: decided\n"
        "models:\n  - spec: baseline:length\n  - spec: baseline:short\nstages: [eval]\n", encoding="utf-8")
    cfg, root = load_study_config(tmp_path / "study.yaml")
    ctx = run_study(cfg, root, quiet=True)
    got = ctx.outputs.eval
    assert got is not None and all(r.sequential is not None for r in got)
    assert len(got) == 4 and {r.sequential["n_used"] for r in got} == {80}  # the first look: 400 / 5
    assert all("decided=0.02 met at 80 of 400 items" in r.sequential["stopped"] for r in got)
    stored = json.loads((Path(got[0].path) / "summary.json").read_text())
    assert stored["sequential"]["rule"] == "decided=0.02" and stored["n_total"] == 80
    with pytest.raises(Exception, match="until"):
        parse_study("name: x\nuntil: soon\nmodels:\n  - spec: baseline:length\n", "study.yaml")


def test_study_eval_stage_races_api_judges_against_free_models_scored_first(judges, tmp_path: Path) -> None:
    """The study's `until: decided` path: the baseline (no API calls) is scored on every item first, the API
    judges stop early, and each summary says why."""
    from prbench.study.config import load_study_config
    from prbench.study.runner import run_study

    data, opts = judges
    judge = f"    options: {json.dumps({'base_url': opts['base_url'], 'api_key_env': opts['api_key_env']})}\n"
    (tmp_path / "study.yaml").write_text(
        f"name: race\ndata: {data}\nout: study-out\nconditions: [none]\nuntil: decided\nmodels:\n"
        f"  - spec: judge:openai:sharp\n{judge}  - spec: judge:openai:coin\n{judge}  - spec: baseline:length\n"
        "stages: [eval]\n", encoding="utf-8")
    cfg, root = load_study_config(tmp_path / "study.yaml")
    got = {r.spec: r.sequential for r in run_study(cfg, root, quiet=True).outputs.eval or []}
    assert got["baseline:length"]["n_used"] == 500 and "scored first (no API calls" in got["baseline:length"]["stopped"]
    assert got["judge:openai:sharp"]["n_used"] < 500 and "pairs at 0.05/3 each" in got["judge:openai:sharp"]["method"]


def test_simulated_studies_stop_earlier_when_judges_are_far_apart() -> None:
    """`expected_call_fraction`: the share of a full study's calls `--until decided` spends, by simulation."""
    from prbench.evaluation.sequential import StudyShape, expected_call_fraction, simulate_study

    far = StudyShape(items=600, users=60, judges=(0.55, 0.85), shifts=(0.0, 0.02))
    near = StudyShape(items=600, users=60, judges=(0.69, 0.71), shifts=(0.0, 0.02))
    sim = simulate_study(far, np.random.default_rng(0))
    assert sim.ranking_reached and sim.pairs_covered and len(sim.n_stop) == 4  # each run's own stop
    assert sim.call_fraction == pytest.approx(sum(sim.n_stop) / (4 * 600))
    assert sim.decisions == (-1, -1)  # per pair (judge 0, judge 1) in each condition: the lower judge below
    given = np.vstack([np.ones(600), np.zeros(600), np.zeros(600), np.ones(600)])  # a study's credits, given
    assert simulate_study(far, np.random.default_rng(0), credits=given).decisions == (1, -1)
    f_far = expected_call_fraction(far, studies=3, seed=1)
    f_near = expected_call_fraction(near, studies=3, seed=1)
    assert f_far < 0.5 < f_near <= 1.0


def test_a_shape_the_benchmark_did_not_simulate_is_simulated_now() -> None:
    """The dry run reads the benchmark's shipped rows; any other study's shape is simulated on the spot."""
    from prbench.stats.seqsim import LIVE_STUDIES, expected_share, study_shape

    shape = study_shape(300, 2, 2, 0, (0.55, 0.85))
    got = expected_share(shape)
    assert got.source == "simulated now" and got.studies == LIVE_STUDIES and 0 < got.fraction < 1
    assert got.run_shares is not None and np.mean(got.run_shares) == pytest.approx(got.fraction)  # each run's own
    assert got.share(1, 0) == got.run_shares[2] and got.share(None, 0) == got.fraction
    assert shape.family is None and shape.judges == (0.55, 0.85) and shape.shifts == (-0.02, 0.0)
    assert study_shape(300, 2, 2, 3).family == 2 * 1 + 2 * 2  # free models first: each judge's own sequence joins
