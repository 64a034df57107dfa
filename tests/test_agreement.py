"""Judge agreement (Cohen's kappa, Krippendorff's alpha) in meta, the leaderboard's resolvable column, the report."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prbench import evaluate
from prbench.meta.stats import cohen_kappa, judge_agreement, krippendorff_alpha
from prbench.store.records import PairwiseRecord, PointwiseRecord
from prbench.testing.records import make_records


def test_kappa_matches_scikit_learn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")  # the dev extra: the reference implementation
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = [str(x) for x in rng.choice(["chosen", "tie", "rejected"], size=60, p=[0.6, 0.1, 0.3])]
        b = [x if rng.random() < 0.7 else str(rng.choice(["chosen", "tie", "rejected"])) for x in a]
        assert cohen_kappa(a, b) == pytest.approx(sklearn_metrics.cohen_kappa_score(a, b))


def test_kappa_by_hand_and_undefined() -> None:
    # 2x2: agree on 3 of 4; marginals A: (2 x, 2 y), B: (1 x, 3 y): p_e = 0.5*0.25 + 0.5*0.75 = 0.5
    assert cohen_kappa(["x", "x", "y", "y"], ["x", "y", "y", "y"]) == pytest.approx((0.75 - 0.5) / 0.5)
    assert cohen_kappa([], []) is None
    assert cohen_kappa(["A", "A"], ["A", "A"]) is None  # one category for both: chance explains everything
    with pytest.raises(ValueError):
        cohen_kappa([1], [1, 2])


def test_alpha_matches_krippendorffs_worked_example() -> None:
    """Krippendorff (2011), "Computing Krippendorff's alpha-reliability", section C: 4 observers, 12 units,
    missing values, nominal alpha = 0.743 (also the reference case of the `krippendorff` package 0.9.0's tests)."""
    observers = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    units = [list(u) for u in zip(*observers, strict=True)]
    assert krippendorff_alpha(units) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha([[1, 1], [2, 2], [1, None]]) == pytest.approx(1.0)
    assert krippendorff_alpha([[1, None], [None, 2]]) is None  # nothing pairable


@dataclass
class _Run:
    items: list[Any]  # the typed records, as `Run.items`


def _judged(verdicts: list[str], positions: list[str]) -> _Run:
    recs = []
    for i, (v, pos) in enumerate(zip(verdicts, positions, strict=True)):
        side = "chosen" if v == pos else "rejected"
        recs.append(PairwiseRecord(id=f"i{i}", verdicts=[v], sides=[side], chosen_position=pos,
                                   credit=1.0 if side == "chosen" else 0.0))
    return _Run(recs)


def test_a_judge_that_always_says_a_agrees_with_no_label() -> None:
    positions = ["A"] * 70 + ["B"] * 30  # 70% accuracy from position alone
    always_a = _judged(["A"] * 100, positions)
    careful = _judged(positions[:90] + ["A" if p == "B" else "B" for p in positions[90:]], positions)
    got = judge_agreement({"always-a": always_a, "careful": careful})  # type: ignore[dict-item]
    assert got is not None
    labels = {x.judge: x.kappa for x in got.with_labels}
    assert labels["always-a"] is None or labels["always-a"] == pytest.approx(0.0)
    assert labels["careful"] > 0.7
    assert np.mean([r.credit for r in always_a.items]) == 0.7  # the accuracy it would be credited with
    [pair] = got.pairs
    assert pair.n == 100 and pair.agree == pytest.approx(0.8)  # items 0-69 both right, 90-99 both wrong
    assert got.krippendorff_alpha is not None and got.n_items == 100
    assert judge_agreement({"rm": _Run([PointwiseRecord(id="x", score_chosen=1.0, score_rejected=0.0, truncated={},
                                                          credit=1.0)])}) is None  # no pairwise judge: nothing


# -- through real runs: meta, leaderboard, report ----------------------------------------------------
def _last_user(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def _reply(body: dict[str, Any]) -> str:
    """`sharp` is right on 90% of items, `lazy` always answers A (per-item hash of the question)."""
    prompt = _last_user(body)
    if body["model"] == "lazy":
        return "Result: A"
    chosen_is_a = prompt.split("<response_a>\n", 1)[1].startswith("Spend Saturday")
    item = prompt.split("(item ", 1)[1].split(")", 1)[0]
    right = int(hashlib.sha256(item.encode()).hexdigest()[:8], 16) / 16**8 < 0.9
    return f"Result: {'A' if chosen_is_a == right else 'B'}"


def test_meta_leaderboard_and_report_show_agreement(fake_openai, api_key_env: tuple[str, str], tmp_path: Path) -> None:
    from prbench.leaderboard import leaderboard, render_rows
    from prbench.meta import meta_evaluate
    from prbench.report import build_report
    from prbench.stats.power import resolvable

    srv = fake_openai(_reply)
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(60)), encoding="utf-8")
    runs = tmp_path / "runs"
    opts = {"base_url": srv.base_url, "api_key_env": api_key_env[0]}
    res = {m: evaluate(f"judge:openai:{m}", str(data), "none", out=runs, model_options=opts, n_boot=20)
           for m in ("sharp", "lazy")}
    meta = meta_evaluate([runs], [], n_boot=10, n_perm=10)
    [bench] = meta.benchmarks
    agree = bench.judge_agreement
    assert agree is not None and agree.judges == ["judge:openai:lazy", "judge:openai:sharp"]
    kappas = {x.judge: x.kappa for x in agree.with_labels}
    assert kappas["judge:openai:sharp"] > 0.6 and (kappas["judge:openai:lazy"] or 0.0) == pytest.approx(0.0)

    rows = leaderboard(runs)
    sharp = next(r for r in rows if r.model == "judge:openai:sharp")
    assert sharp.resolvable == pytest.approx(resolvable(res["sharp"].records))
    head, _ = render_rows(rows, wide=True)
    assert "resolves (pts)" in head

    html = build_report(runs, tmp_path / "report.html", n_boot=10, n_perm=10).read_text(encoding="utf-8")
    assert "judge agreement [none]" in html and "Krippendorff" in html and "Smallest accuracy difference" in html
