"""Typed run summaries and records: every driver stamps its kind; readers dispatch on it."""

from __future__ import annotations

import json

import pytest

from prbench import evaluate
from prbench.errors import DataError
from prbench.store.records import FORMAT, legacy_kind, run_kind, stamp, typed_record, typed_summary


def test_eval_summary_is_stamped_and_typed(tmp_path):
    res = evaluate("baseline:length", "sample", "none", out=tmp_path, limit=5)
    s = json.loads((res.path / "summary.json").read_text())
    assert (s["format"], s["run"]) == (FORMAT, "eval")
    typed = typed_summary(s)
    assert typed.n_total == 5 and typed.kind == "pointwise"
    for line in (res.path / "examples.jsonl").read_text().splitlines():
        rec = typed_record(json.loads(line))
        assert rec.truncated_any is False


def test_unstamped_summaries_of_this_version_still_load():
    """Folders written before the stamp: the kind comes from the one legacy rule."""
    old_eval = {"model": "m", "spec": "m", "data": "sample", "condition": "none", "kind": "pointwise",
                "accuracy": 0.5, "n": 2, "n_total": 2, "metrics": {"accuracy": 0.5, "n": 2, "n_invalid": 0}}
    assert run_kind(old_eval) == "eval" == legacy_kind(old_eval)
    old_pa = {"policy": "p", "condition": "none", "policy_accuracy": 0.5, "metrics": {}}
    assert run_kind(old_pa) == "policy-accuracy"
    assert run_kind({"samples": "x"}) is None


def test_stamp_wins_over_keys():
    """A stamped summary is read by its kind, whatever keys it holds."""
    s = stamp("icl", {"policy": "p", "condition": "none", "metrics": {"accuracy": 1.0}, "spec": "x"})
    assert run_kind(s) == "icl"
    with pytest.raises(ValueError):
        stamp("nonsense", {})


def test_missing_field_is_named_with_the_file():
    bad = stamp("eval", {"model": "m", "data": "d", "condition": "none", "kind": "pointwise", "accuracy": 0.5,
                         "n": 1, "metrics": {"accuracy": 0.5, "n": 1, "n_invalid": 0}})
    with pytest.raises(DataError, match=r"runs/x/summary.json: n_total: Field required"):
        typed_summary(bad, "runs/x/summary.json")


def test_record_of_the_wrong_shape_is_located():
    with pytest.raises(DataError, match=r"examples.jsonl:7: score_chosen"):
        typed_record({"id": "a", "truncated": {"chosen": False, "rejected": False}}, "examples.jsonl", 7)


def test_a_driver_never_writes_a_summary_its_readers_refuse(tmp_path):
    """RunDir.write_summary validates a run's summary against its kind's model first (NaN, a missing field)."""
    from prbench.store.runs import RunDir

    run = RunDir(tmp_path / "r", {"model": "m"})
    run.append([{"id": "a", "credit": 1.0}])
    good = {"model": "m", "data": "d", "condition": "none", "kind": "pointwise", "accuracy": 1.0, "n": 1,
            "n_total": 1, "metrics": {"accuracy": 1.0, "n": 1, "n_invalid": 0}}
    for bad, field in (({**good, "accuracy": float("nan")}, "accuracy"), ({k: v for k, v in good.items()
                                                                           if k != "n_total"}, "n_total")):
        with pytest.raises(DataError, match=rf"summary\.json: {field}"):
            run.write_summary(stamp("eval", bad))
        assert not (tmp_path / "r" / "summary.json").exists()
    run.write_summary(stamp("eval", good))
    assert typed_summary(json.loads((tmp_path / "r" / "summary.json").read_text())).accuracy == 1.0
