"""Meta-evaluation on hand-made runs: every rank metric against a value worked out by hand.

Fake eval runs and downstream files are written in tmp dirs with known per-item values, so the
per-RM benchmark and downstream means (and therefore every correlation) are known exactly.
Helpers here are reused by test_report.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from scipy import stats

from prbench import run_path, summarize
from prbench.downstream.results import DownstreamResult, write_downstream
from prbench.meta import meta_evaluate, write_meta
from prbench.schema import CATEGORIES
from prbench.store.runs import RunDir, write_json_atomic
from prbench.train.protocol import user_breakdown

FAST = {"n_boot": 100, "n_perm": 100, "seed": 0}


# --------------------------------------------------------------------------- helpers (shared)


def write_eval_run(root: Path, spec: str, credits: Sequence[float | None], *, condition: str = "none",
                   data: str = "fake", ids: Sequence[str] | None = None, categories: Sequence[str] | None = None,
                   margins: Sequence[float] | None = None, pairwise: bool = False, model: str | None = None,
                   n_boot: int = 100, users: Sequence[str] | None = None, seen_users: set[str] | None = None) -> Path:
    """An eval run folder in the layout `evaluate` writes (config, examples.jsonl, summary.json).

    `users`: each record's person; `seen_users`: the people the RM was trained on, so the summary's `per_user`
    splits seen from unseen people as `evaluate` does for a trained RM (`user_breakdown`)."""
    ids = list(ids or [f"item-{i:03d}" for i in range(len(credits))])
    cats = list(categories or [CATEGORIES[i % 3] for i in range(len(credits))])
    records = []
    for j, (i, c) in enumerate(zip(ids, credits)):
        rec: dict[str, Any] = {"id": i, "category": cats[j], "condition": condition,
                               "longer": "chosen" if j % 3 else "rejected"}
        if pairwise:
            pos = "A" if j % 2 == 0 else "B"
            other = "B" if pos == "A" else "A"
            verdict = None if c is None else (pos if c == 1.0 else ("tie" if c == 0.5 else other))
            side = None if c is None else {1.0: "chosen", 0.0: "rejected", 0.5: "tie"}[c]
            rec.update(chosen_position=pos, verdicts=[verdict], sides=[side], truncated=False)
        else:
            m = (margins[j] if margins is not None else (0.0 if c is None else (c - 0.5) * 2))
            rec.update(score_chosen=None if c is None else m, score_rejected=None if c is None else 0.0,
                       truncated={"chosen": False, "rejected": False})
            if c is not None:
                rec["margin"] = m
        rec["credit"] = c
        if users is not None:
            rec["user_id"] = users[j]
        if c is None:
            rec["invalid"] = "unparseable verdict"
        records.append(rec)
    path = run_path(root, spec, data, condition)
    run = RunDir(path, {"model": spec, "data": data, "condition": condition, "seed": 0}, overwrite=True)
    run.append(records)
    m = summarize(records, seed=0, n_boot=n_boot)
    run.write_summary({"model": model or spec, "spec": spec, "data": data, "condition": condition,
                       "kind": "pairwise" if pairwise else "pointwise", "seed": 0, "accuracy": m["accuracy"],
                       "n": m["n"], "n_total": len(records), "metrics": m,
                       "model_info": {"fingerprint": {"spec": spec}, "prompt_hashes": {"judge": "abc123def456"}},
                       "versions": {"prbench": "0.1.0", "python": "3.11"}, "wall_time_s": 0.5,
                       **({"per_user": user_breakdown(records, SimpleNamespace(seen_users=lambda: seen_users),
                                                      seed=0, n_boot=n_boot)} if seen_users is not None else {})})
    return path


def write_ds(root: Path, rm: str, values: Mapping[str, float | Mapping[int, float]], *, setting: str = "rl",
             condition: str | None = None, extra: Mapping[str, Any] | None = None) -> Path:
    """A downstream.json with given per-item values (a float for k=[1], or {k: value} for BoN)."""
    first = next(iter(values.values()))
    ks = sorted(first) if isinstance(first, Mapping) else [1]
    per_item = {i: ({str(k): float(v[k]) for k in ks} if isinstance(v, Mapping) else {"1": float(v)})
                for i, v in values.items()}
    means = [float(np.mean([per_item[i][str(k)] for i in per_item])) for k in ks]
    ex = {"data": "fake", **dict(extra or {})}
    if condition is not None:
        ex["condition"] = condition
    if setting == "bon":
        ex.setdefault("oracle", [m + 0.3 for m in means])
        ex.setdefault("random", [means[0]] * len(ks))
    res = DownstreamResult(rm=rm, setting=setting, k=ks, first_k=means, expected=means,
                           ci_low=[m - 0.1 for m in means], ci_high=[m + 0.1 for m in means], per_item=per_item,
                           grader="openai:grader", n_items=len(per_item), extra=ex)
    safe = rm.replace(":", "_").replace("/", "_").replace("<", "_").replace(">", "_")
    return write_downstream(root / setting / (condition or "any") / safe, res)


def credits_with_mean(n_right: int, n: int) -> list[float]:
    return [1.0] * n_right + [0.0] * (n - n_right)


def values_with_mean(mean: float, n: int, spread: float = 0.3) -> list[float]:
    """n values with exactly this mean: mean +- spread alternating (n even)."""
    return [mean + (spread if j % 2 == 0 else -spread) for j in range(n)]


# Four RMs: benchmark accuracy 0.9 > 0.7 > 0.5 > 0.3; downstream 1.8, 1.0, 1.2, 0.4 (RMs 2 and 3 swap).
RMS = ["rm:a", "rm:b", "rm:c", "rm:d"]
ACC = [9, 7, 5, 3]  # right out of 10
DOWN = [1.8, 1.0, 1.2, 0.4]


def make_study(tmp: Path, *, reps: int = 1, same_ids: bool = True, rms: Sequence[str] = RMS,
               condition: str = "none") -> tuple[Path, Path]:
    """Eval runs and RL downstream files for the RMs above; `reps` repeats every item pattern."""
    runs, ds = tmp / "runs", tmp / "ds"
    n = 10 * reps
    ids = [f"item-{i:03d}" for i in range(n)]
    ds_ids = ids if same_ids else [f"q-{i:03d}" for i in range(n)]
    for rm, right, down in zip(rms, ACC, DOWN):
        write_eval_run(runs, rm, credits_with_mean(right, 10) * reps, ids=ids, condition=condition)
        write_ds(ds, rm, dict(zip(ds_ids, values_with_mean(down, 10) * reps)))
    return runs, ds


# --------------------------------------------------------------------------- hand-computed metrics


def test_metric_values_match_hand_computation(tmp_path: Path) -> None:
    runs, ds = make_study(tmp_path)
    res = meta_evaluate([runs], [ds], **FAST)
    assert len(res.rows) == 1
    row = res.rows[0]
    assert row.rms == RMS and row.n_rms == 4
    assert row.benchmark_scores == pytest.approx(dict(zip(RMS, [0.9, 0.7, 0.5, 0.3])))
    assert row.downstream_scores == pytest.approx(dict(zip(RMS, DOWN)))
    m = {k: v.value for k, v in row.metrics.items()}
    # ranks x: 4 3 2 1, y: 4 2 3 1 -> sum d^2 = 2 -> rho = 1 - 6*2/(4*15)
    assert m["spearman"] == pytest.approx(0.8)
    # 6 pairs, one discordant (b, c) -> (5 - 1) / 6
    assert m["kendall_tau_b"] == pytest.approx(4 / 6)
    x, y = np.array([0.9, 0.7, 0.5, 0.3]), np.array(DOWN)
    r = np.sum((x - x.mean()) * (y - y.mean())) / math.sqrt(np.sum((x - x.mean()) ** 2) * np.sum((y - y.mean()) ** 2))
    assert m["pearson"] == pytest.approx(r)
    # NDCG: order a b c d, gains y - min = 1.4 0.6 0.8 0; ideal order a c b d
    dcg = 1.4 + 0.6 / math.log2(3) + 0.8 / 2
    idcg = 1.4 + 0.8 / math.log2(3) + 0.6 / 2
    assert m["ndcg"] == pytest.approx(dcg / idcg)
    # RBO_EXT, p = 0.9, lists [a b c d] vs [a c b d]: overlaps X_d = 1, 1, 3, 4
    p = 0.9
    xd = [1, 1, 3, 4]
    rbo = (1 - p) * sum(p ** (d - 1) * xd[d - 1] / d for d in range(1, 5)) + p**4 * xd[3] / 4
    assert m["rbo"] == pytest.approx(rbo)
    assert m["weighted_tau"] == pytest.approx(stats.weightedtau(x, y).statistic)
    # every metric has a CI around its value and a p-value in (0, 1]
    for name, v in row.metrics.items():
        assert v.ci_low is not None and v.ci_low <= v.ci_high, name
        assert 0 < v.p_value <= 1, name
    assert row.resampling == "joint"
    assert set(res.definitions) >= {"spearman", "kendall_tau_b", "weighted_tau", "pearson", "ndcg", "rbo",
                                       "p_value", "summary.mean", "resampling_joint"}
    assert res.parameters.p == 0.9 and res.parameters.n_boot == 100
    assert res.defaults.n_boot == 1000


def test_ndcg_k_and_rbo_p_are_parameters(tmp_path: Path) -> None:
    runs, ds = make_study(tmp_path)
    res = meta_evaluate([runs], [ds], k=1, p=0.5, **FAST)
    m = {k: v.value for k, v in res.rows[0].metrics.items()}
    assert m["ndcg"] == pytest.approx(1.0)  # the top RM by benchmark is also the top downstream
    xd = [1, 1, 3, 4]
    rbo = 0.5 * sum(0.5 ** (d - 1) * xd[d - 1] / d for d in range(1, 5)) + 0.5**4
    assert m["rbo"] == pytest.approx(rbo)
    assert res.parameters.k == 1 and res.parameters.p == 0.5


def test_perfect_agreement_and_p_value(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    for rm, right, down in zip(RMS, ACC, [1.8, 1.2, 1.0, 0.4]):
        write_eval_run(runs, rm, credits_with_mean(right, 10))
        write_ds(ds, rm, dict(zip([f"item-{i:03d}" for i in range(10)], values_with_mean(down, 10))))
    res = meta_evaluate([runs], [ds], seed=0, n_boot=50, n_perm=500)
    m = res.rows[0].metrics
    for name in ("spearman", "kendall_tau_b", "weighted_tau", "ndcg", "rbo"):
        assert m[name].value == pytest.approx(1.0), name
    # 4 RMs: 1 of 24 orderings is the identity, so p is about 1/24 (plus the +1 correction)
    assert m["spearman"].p_value == pytest.approx(1 / 24, abs=0.03)


# --------------------------------------------------------------------------- uncertainty


def test_cis_shrink_as_items_grow(tmp_path: Path) -> None:
    small = meta_evaluate(*[[p] for p in make_study(tmp_path / "s", reps=1)], **FAST).rows[0].metrics
    big = meta_evaluate(*[[p] for p in make_study(tmp_path / "b", reps=8)], **FAST).rows[0].metrics
    for name in ("spearman", "pearson", "kendall_tau_b"):
        w_small = small[name].ci_high - small[name].ci_low
        w_big = big[name].ci_high - big[name].ci_low
        assert w_big < w_small, (name, w_small, w_big)
    assert small["spearman"].value == pytest.approx(big["spearman"].value)  # same means, same point value


def test_joint_resampling_when_items_shared_else_independent(tmp_path: Path) -> None:
    # downstream = the benchmark credits themselves: under joint resampling every replicate agrees perfectly
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(12)]
    rng = np.random.default_rng(1)
    for rm, right in zip(RMS, [10, 8, 6, 4]):
        c = [float(v) for v in rng.permutation(credits_with_mean(right, 12))]
        write_eval_run(runs, rm, c, ids=ids)
        write_ds(ds / "same", rm, dict(zip(ids, c)))
        write_ds(ds / "other", rm, {f"q-{i:03d}": v for i, v in enumerate(c)})
    joint = meta_evaluate([runs], [ds / "same"], **FAST).rows[0]
    indep = meta_evaluate([runs], [ds / "other"], **FAST).rows[0]
    assert joint.resampling == "joint" and indep.resampling == "independent"
    assert joint.n_items_shared == 12 and indep.n_items_shared == 0
    assert joint.metrics["pearson"].ci_low == pytest.approx(1.0)
    assert joint.metrics["pearson"].ci_high == pytest.approx(1.0)
    assert indep.metrics["pearson"].ci_low < 0.99
    # forcing independent on shared items widens the CI too
    forced = meta_evaluate([runs], [ds / "same"], pairing="independent", **FAST).rows[0]
    assert forced.resampling == "independent" and forced.metrics["pearson"].ci_low < 0.99


def test_partial_overlap_uses_threshold(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(20)]
    for rm, right, down in zip(RMS, [18, 14, 10, 6], DOWN):
        write_eval_run(runs, rm, credits_with_mean(right, 20), ids=ids)
        write_ds(ds, rm, dict(zip(ids[:10], values_with_mean(down, 10))))  # half of the benchmark items
    auto = meta_evaluate([runs], [ds], **FAST).rows[0]
    assert auto.resampling == "independent" and auto.n_items_benchmark == 20
    joint = meta_evaluate([runs], [ds], pairing="joint", **FAST).rows[0]
    assert joint.resampling == "joint" and joint.n_items_benchmark == 10 == joint.n_items_downstream
    loose = meta_evaluate([runs], [ds], joint_min_share=0.5, **FAST).rows[0]
    assert loose.resampling == "joint"


# --------------------------------------------------------------------------- edge cases


def test_fewer_than_three_rms_gives_a_note(tmp_path: Path) -> None:
    runs, ds = make_study(tmp_path, rms=RMS[:2])
    res = meta_evaluate([runs], [ds], **FAST)
    row = res.rows[0]
    assert row.metrics is None and row.n_rms == 2
    assert "at least 3 RMs" in row.note
    out = write_meta(res, tmp_path / "meta")
    assert "at least 3 RMs" in out["md"].read_text()


def test_no_downstream_and_no_runs_are_notes(tmp_path: Path) -> None:
    runs, _ = make_study(tmp_path)
    (tmp_path / "empty").mkdir()
    res = meta_evaluate([runs], [tmp_path / "empty"], **FAST)
    assert res.rows == [] and any("no downstream" in n for n in res.notes)
    res = meta_evaluate([tmp_path / "empty"], [tmp_path / "ds"], **FAST)
    assert res.rows == [] and any("no eval runs" in n for n in res.notes)


def test_invalid_items_are_dropped_for_every_rm(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    for j, (rm, right, down) in enumerate(zip(RMS, ACC, DOWN)):
        c: list[float | None] = list(credits_with_mean(right, 10))
        if j == 0:
            c[9] = None  # rm:a invalid on item 9 (a wrong answer for everybody else too)
        write_eval_run(runs, rm, c, ids=ids)
        write_ds(ds, rm, dict(zip(ids, values_with_mean(down, 10))))
    row = meta_evaluate([runs], [ds], **FAST).rows[0]
    assert row.n_items_benchmark == 9
    assert row.benchmark_scores["rm:a"] == pytest.approx(1.0)
    assert row.benchmark_scores["rm:b"] == pytest.approx(7 / 9)


def test_alignment_by_spec_or_model_name(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    for rm, right, down in zip(RMS, ACC, DOWN):
        write_eval_run(runs, f"hf:{rm}", credits_with_mean(right, 10), ids=ids, model=f"name-{rm}")
        ds_name = f"name-{rm}" if rm in ("rm:a", "rm:b") else f"hf:{rm}"  # half by model name, half by spec
        write_ds(ds, ds_name, dict(zip(ids, values_with_mean(down, 10))))
    write_ds(ds, "rm:unknown", dict(zip(ids, values_with_mean(1.0, 10))))
    row = meta_evaluate([runs], [ds], **FAST).rows[0]
    assert row.n_rms == 4 and row.rms == [f"hf:{rm}" for rm in RMS]
    assert row.unmatched_downstream_rms == ["rm:unknown"]
    assert row.metrics["spearman"].value == pytest.approx(0.8)


# --------------------------------------------------------------------------- settings and summaries


def test_bon_rows_at_every_k_and_max(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    for rm, right, down in zip(RMS, ACC, DOWN):
        write_eval_run(runs, rm, credits_with_mean(right, 10), ids=ids)
        # k=1: everyone equal-ish order reversed; k=4: the DOWN order
        per = {i: {1: 1.0 - down / 10 + (0.05 if j % 2 else -0.05), 2: 1.0, 4: v}
               for j, (i, v) in enumerate(zip(ids, values_with_mean(down, 10)))}
        write_ds(ds, rm, per, setting="bon", condition="profile")
    res = meta_evaluate([runs], [ds], **FAST)
    rows = {r.setting.k: r for r in res.rows}
    assert sorted(rows) == [1, 2, 4]
    assert rows[4].setting.max_k and not rows[1].setting.max_k
    assert "(max)" in rows[4].setting.label and "[profile]" in rows[4].setting.label
    assert rows[4].metrics["spearman"].value == pytest.approx(0.8)
    assert rows[1].metrics["spearman"].value == pytest.approx(-0.8)
    assert rows[2].metrics["spearman"].value is None  # constant downstream: undefined, not a crash
    md = write_meta(res, tmp_path / "meta")["md"].read_text()
    assert "## Best-of-N at every k" in md


def test_summary_comparison_worst_category_and_margin(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(12)]
    cats = [CATEGORIES[i // 4] for i in range(12)]  # 4 items per category
    # per category right answers (out of 4): mean ranks a > b > c > d, worst category ranks b = c > a > d
    pattern = {"rm:a": (4, 4, 1), "rm:b": (3, 3, 2), "rm:c": (2, 2, 3), "rm:d": (0, 1, 1)}
    down = {"rm:a": 1.0, "rm:b": 1.5, "rm:c": 1.2, "rm:d": 0.2}  # downstream follows worst category
    margins = {"rm:a": 0.5, "rm:b": 0.9, "rm:c": 0.7, "rm:d": 0.1}  # and margins exactly
    for rm, per_cat in pattern.items():
        c = [1.0 if j % 4 < per_cat[j // 4] else 0.0 for j in range(12)]
        write_eval_run(runs, rm, c, ids=ids, categories=cats, margins=[margins[rm]] * 12)
        write_ds(ds, rm, dict(zip(ids, values_with_mean(down[rm], 12))))
    res = meta_evaluate([runs], [ds], **FAST)
    row = res.rows[0]
    by = row.by_summary
    assert by["mean"].scores["rm:a"] == pytest.approx(9 / 12)
    assert by["worst_category"].scores == pytest.approx({"rm:a": 0.25, "rm:b": 0.5, "rm:c": 0.5, "rm:d": 0.0})
    assert by["mean_margin"].scores == pytest.approx(margins)
    assert by["mean"].spearman == pytest.approx(0.4)  # ranks 4 3 2 1 vs 2 4 3 1: sum d^2 = 6
    assert by["worst_category"].spearman > by["mean"].spearman
    assert by["mean_margin"].spearman == pytest.approx(1.0)
    assert row.best_summary == "mean_margin"
    assert res.summary_comparison.best == "mean_margin"
    wc = meta_evaluate([runs], [ds], summary="worst_category", **FAST).rows[0]
    assert wc.metrics["spearman"].value == pytest.approx(by["worst_category"].spearman)
    assert wc.metrics["spearman"].ci_low is not None


def test_margin_summary_unavailable_for_pairwise_judges(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    for rm, right, down in zip(RMS, ACC, DOWN):
        write_eval_run(runs, rm, credits_with_mean(right, 10), ids=ids, pairwise=rm == "rm:a")
        write_ds(ds, rm, dict(zip(ids, values_with_mean(down, 10))))
    row = meta_evaluate([runs], [ds], **FAST).rows[0]
    assert row.by_summary["mean_margin"] is None and row.metrics is not None
    row = meta_evaluate([runs], [ds], summary="mean_margin", **FAST).rows[0]
    assert row.metrics is None and "not available" in row.note


def write_pa_run(root: Path, rm: str | None, credit_total: Mapping[str, float], rm_credit: Mapping[str, float],
                 *, policy: str = "builtin:smollm2-135m-instruct", condition: str = "oracle", w: float = 1.0) -> Path:
    """A policy-accuracy run folder as downstream.policy_accuracy writes it."""
    path = root / "policy-accuracy" / (rm or "none").replace(":", "_") / condition
    recs = [{"id": i, "category": CATEGORIES[0], "credit_total": v, "credit_norm": v, "plain_credit_total": 0.5,
             "plain_credit_norm": 0.5, **({"rm_credit": rm_credit[i]} if i in rm_credit else {})}
            for i, v in credit_total.items()]
    path.mkdir(parents=True, exist_ok=True)
    (path / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    acc = float(np.mean(list(credit_total.values())))
    own = float(np.mean(list(rm_credit.values()))) if rm_credit else None
    summ = {"accuracy": acc, "ci_low": acc - 0.1, "ci_high": acc + 0.1, "n": len(recs)}
    write_json_atomic(path / "summary.json", {
        "policy": policy, "rm": rm, "data": "fake", "condition": condition, "w": w, "k": 10, "mode": "full",
        "repetition_penalty": 1.0, "reward_norm": "none", "seed": 0, "wall_time_s": 1.0,
        "metrics": {"policy_accuracy": {"total": summ, "normalized": summ},
                    "plain_policy_accuracy": {"total": {"accuracy": 0.5, "ci_low": 0.4, "ci_high": 0.6},
                                              "normalized": None},
                    "rm_accuracy": None if own is None else {"accuracy": own, "ci_low": own - 0.1,
                                                             "ci_high": own + 0.1},
                    "n": len(recs), "agreement_with_plain": {"total": 0.8, "normalized": 0.8},
                    "mean_topk_coverage": 0.9},
        "policy_accuracy": acc, "plain_policy_accuracy": 0.5, "definition": "test"})
    return path


def test_policy_accuracy_setting_and_paper_b_kendall(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    pa_right = {"rm:a": 6, "rm:b": 8, "rm:c": 5, "rm:d": 4}  # PA order b > a > c > d
    own_right = {"rm:a": 9, "rm:b": 7, "rm:c": 6, "rm:d": 5}  # in-run RM accuracy order a > b > c > d
    for rm, right in zip(RMS, ACC):
        write_eval_run(runs, rm, credits_with_mean(right, 10), ids=ids, condition="oracle")
        write_pa_run(ds, rm, dict(zip(ids, credits_with_mean(pa_right[rm], 10))),
                     dict(zip(ids, credits_with_mean(own_right[rm], 10))))
    write_pa_run(ds, None, dict(zip(ids, [0.5] * 10)), {}, w=0.0)  # plain policy: not ranked
    res = meta_evaluate([runs], [ds], **FAST)
    (row,) = res.rows
    assert row.setting.setting == "policy_accuracy" and row.resampling == "joint"
    assert row.downstream_scores["rm:b"] == pytest.approx(0.8)
    assert row.metrics["kendall_tau_b"].value == pytest.approx(4 / 6)  # one swapped pair of six
    kinds = {e.source: e for e in res.paper_b}
    assert kinds["benchmark"].kendall_tau_b.value == pytest.approx(4 / 6)
    assert kinds["in-run"].kendall_tau_b.value == pytest.approx(4 / 6)
    assert any("plain policy" in n for n in res.notes)
    md = write_meta(res, tmp_path / "meta")["md"].read_text()
    assert "paper B" in md


def test_condition_filter_and_match(tmp_path: Path) -> None:
    runs, ds = tmp_path / "runs", tmp_path / "ds"
    ids = [f"item-{i:03d}" for i in range(10)]
    for cond in ("none", "profile"):
        for rm, right, down in zip(RMS, ACC, DOWN):
            write_eval_run(runs, rm, credits_with_mean(right, 10), ids=ids, condition=cond)
    for rm, down in zip(RMS, DOWN):
        write_ds(ds, rm, dict(zip(ids, values_with_mean(down, 10))), condition="profile")
    assert len(meta_evaluate([runs], [ds], **FAST).rows) == 2
    only = meta_evaluate([runs], [ds], conditions="none", **FAST)
    assert [r.benchmark.condition for r in only.rows] == ["none"]
    matched = meta_evaluate([runs], [ds], match_condition=True, **FAST)
    assert [r.benchmark.condition for r in matched.rows] == ["profile"]


# --------------------------------------------------------------------------- outputs and CLI


def test_outputs_csv_md_json(tmp_path: Path) -> None:
    import csv

    runs, ds = make_study(tmp_path)
    res = meta_evaluate([runs], [ds], **FAST)
    out = write_meta(res, tmp_path / "meta")
    data = json.loads(out["json"].read_text())
    assert data["rows"][0]["metrics"]["spearman"]["value"] == pytest.approx(0.8)
    with out["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert float(rows[0]["spearman"]) == pytest.approx(0.8) and rows[0]["resampling"] == "joint"
    md = out["md"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| benchmark | setting | RMs"))
    assert header.split(" | ")[3:8] == ["NDCG", "weighted tau", "Spearman", "RBO", "Kendall |"]
    assert "0.800 [" in md  # Spearman "value [lo, hi]"


def test_meta_json_reads_back_through_the_model(tmp_path: Path) -> None:
    """Issue 49: one typed result; a meta.json read back writes the same JSON and CSV (its Markdown lists the
    definitions in the file's sorted order), a damaged one is one line naming the field."""
    from prbench.errors import PrbenchError
    from prbench.meta.result import MetaResult

    runs, ds = make_study(tmp_path)
    res = meta_evaluate([runs], [ds], **FAST)
    assert isinstance(res, MetaResult) and res.rows[0].metric("spearman").value == pytest.approx(0.8)
    first = write_meta(res, tmp_path / "a")
    again = write_meta(MetaResult.read(first["json"]), tmp_path / "b")
    assert all(first[k].read_bytes() == again[k].read_bytes() for k in ("json", "csv"))
    data = json.loads(first["json"].read_text())
    data["rows"][0]["n_rms"] = "four"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(PrbenchError, match=r"bad.json: not a meta.json written by `prbench meta` \(rows.0.n_rms: "):
        MetaResult.read(tmp_path / "bad.json")


def cli_app():
    from prbench.cli import command_app

    return command_app("meta", "report")


def test_cli_meta(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    runs, ds = make_study(tmp_path)
    out = tmp_path / "meta"
    r = CliRunner().invoke(cli_app(), ["meta", "--runs", str(runs), "--downstream", str(ds), "--out", str(out),
                                       "--n-boot", "100", "--n-perm", "100", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["rows"][0]["metrics"]["kendall_tau_b"]["value"] == pytest.approx(4 / 6)
    assert (out / "meta.md").exists() and (out / "meta.csv").exists()
    r = CliRunner().invoke(cli_app(), ["meta", "--runs", str(runs), "--downstream", str(ds), "--out", str(out),
                                       "--n-boot", "50", "--n-perm", "50", "--summary", "worst_category"])
    assert r.exit_code == 0, r.output
    assert "Spearman" in r.stdout


def test_cli_meta_few_rms_prints_note(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    runs, ds = make_study(tmp_path, rms=RMS[:2])
    r = CliRunner().invoke(cli_app(), ["meta", "--runs", str(runs), "--downstream", str(ds), "--out",
                                       str(tmp_path / "m"), "--n-boot", "20", "--n-perm", "20"],
                             env={"COLUMNS": "200"})  # wide enough that the note column is not wrapped
    assert r.exit_code == 0, r.output
    assert "at least 3" in r.stdout
