"""Cross-benchmark meta-evaluation: one RM set on benchmarks of different formats and a downstream
setting; `prbench meta` and the study's report say which benchmark ranks the RMs most like it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench.meta import MetaRow, cross_benchmark, meta_evaluate, meta_markdown
from prbench.study.config import load_study_config
from prbench.study.runner import run_study
from prbench.testing.tiny import make_tiny_causal_lm

FIX = Path(__file__).parent / "data" / "formats"
RMS = ("baseline:length", "baseline:short", "baseline:random", "baseline:lexical")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cross")
    policy = make_tiny_causal_lm(root / "policy", seed=0)
    models = "".join(f"  - spec: {rm}\n" for rm in RMS)
    (root / "study.yaml").write_text(f"""\
name: cross
data: sample
limit: 6
out: out
conditions: [profile]
benchmarks:
  - data: {FIX / "rewardbench2.jsonl"}
    format: rewardbench2
  - data: {FIX / "hh-rlhf.jsonl"}
models:
{models}sample:
  policy: hf:{policy}
  n: 3
  limit: 6
  max_new_tokens: 12
bon:
  condition: profile
  grader: embedding:builtin:minilm-l6
stages: [eval, sample, bon, meta, report]
""", encoding="utf-8")
    run_study(*load_study_config(root / "study.yaml"), quiet=True)
    return root / "out"


def test_study_over_two_formats_reports_the_cross_benchmark_table(study: Path) -> None:
    meta = json.loads((study / "meta" / "meta.json").read_text())
    labels = {b["label"] for b in meta["benchmarks"]}
    assert len(labels) == 3 and any("rewardbench2" in x for x in labels) and any("hh-rlhf" in x for x in labels)
    cross = meta["cross_benchmark"]
    assert cross and all(len(c["benchmarks"]) == 3 for c in cross)
    for c in cross:
        for e in c["benchmarks"]:
            assert e["n_rms"] == len(RMS) and set(e["metrics"]) == {"ndcg", "weighted_tau", "spearman", "rbo"}
            assert all(v is None or {"value", "ci_low", "ci_high", "p_value"} <= set(v) for v in e["metrics"].values())
        # the best per metric is the benchmark with the highest value of that metric
        for m, best in c["best"].items():
            vals = {e["benchmark"]: e["metrics"][m]["value"] for e in c["benchmarks"]
                    if e["metrics"][m] and e["metrics"][m]["value"] is not None}
            assert best is None if not vals else vals[best] == max(vals.values())
    md = (study / "meta" / "meta.md").read_text()
    assert "Which benchmark ranks the RMs most like each downstream setting" in md
    html = (study / "report.html").read_text()
    assert 'id="cross-benchmark"' in html and "best overall" in html


def test_benchmark_side_counts_multi_response_items_once(study: Path) -> None:
    meta = json.loads((study / "meta" / "meta.json").read_text())
    row = next(r for r in meta["rows"] if "rewardbench2" in r["benchmark"]["label"] and r["metrics"])
    assert row["n_items_benchmark"] == 6  # 6 items, not their 20 pairs
    # the per-RM benchmark value is the run's own item-level accuracy
    summaries = {json.loads(p.read_text())["spec"]: json.loads(p.read_text())["accuracy"]
                 for p in study.rglob("summary.json") if "rewardbench2" in str(p)}
    assert row["benchmark_scores"] == pytest.approx(summaries)


def test_cli_meta_prints_the_cross_benchmark_table(study: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "prbench", "meta", "--runs", str(study / "runs"), "--downstream",
                          str(study / "runs" / "downstream"), "--out", str(tmp_path / "m"), "--n-boot", "50",
                          "--n-perm", "50"], capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "which benchmark ranks the RMs most like it" in out.stdout and "best overall" in out.stdout


def test_cross_benchmark_needs_two_benchmarks() -> None:
    row = {"setting": {"setting": "rl", "label": "RL", "max_k": False}, "benchmark": {"label": "a [none]",
           "data": "a", "condition": "none", "summary": "mean"}, "n_rms": 3, "rms": ["x", "y", "z"], "note": None,
           "metrics": {m: {"value": 0.5, "ci_low": 0.1, "ci_high": 0.9, "p_value": 0.2}
                       for m in ("ndcg", "weighted_tau", "spearman", "rbo", "kendall_tau_b")}}
    assert cross_benchmark([MetaRow.model_validate(row)]) == []
    other = json.loads(json.dumps(row))
    other["benchmark"]["label"] = "b [none]"
    other["metrics"]["spearman"]["value"] = 0.9
    (c,) = cross_benchmark([MetaRow.model_validate(row), MetaRow.model_validate(other)])
    assert c.best["spearman"] == "b [none]" and c.best["ndcg"] == "a [none]"  # a tie goes to the first label
    assert c.best_overall == "a [none]" and c.wins == {"a [none]": 3, "b [none]": 1} and c.same_rms


def test_meta_evaluate_api_over_two_formats(study: Path) -> None:
    res = meta_evaluate([study / "runs"], [study / "runs" / "downstream"], n_boot=20, n_perm=20)
    assert res.cross_benchmark and "## Which benchmark ranks" in meta_markdown(res)
