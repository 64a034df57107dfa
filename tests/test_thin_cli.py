"""`evaluate` owns building the model: once for each run that needs scoring (an RM's counts are its run's), never
for a finished run read back (a model that fails whenever it is built proves it), with its options checked once;
its return type says one result for one condition and a list for a list."""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

import pytest

import prbench
from prbench.evaluation import evaluate as _evaluate
from prbench.rewards import base

# Counts its builds in BUILDS (a file, so the count survives the CLI's process-wide state) and refuses to be
# built at all while PRBENCH_TEST_REFUSE_BUILD is set: a stand-in for weights that must not be loaded.
RM_FILE = '''
import os
from pathlib import Path

from prbench.rewards import PointwiseRM, Score


class Counted(PointwiseRM):
    uses_context = True

    def __init__(self, **options):
        if os.environ.get("PRBENCH_TEST_REFUSE_BUILD"):
            raise RuntimeError("built while reading back a finished run")
        with open(os.environ["PRBENCH_TEST_BUILDS"], "a") as f:
            f.write("built\\n")
        self.scored = 0

    def score(self, batch):
        self.scored += len(batch)
        return [Score(float(len(response))) for _, response in batch]

    def run_info(self):
        return {"scored": self.scored}
'''


@pytest.fixture
def rm_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PRBENCH_TEST_BUILDS", str(tmp_path / "builds.txt"))
    (tmp_path / "counted.py").write_text(RM_FILE, encoding="utf-8")
    return f"py:{tmp_path / 'counted.py'}:Counted"


def builds(tmp_path: Path) -> int:
    f = tmp_path / "builds.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    from prbench.cli import main

    monkeypatch.setattr(sys, "argv", ["prbench", *args])
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_the_cli_builds_once_and_reads_a_finished_run_back_without_building(
        rm_spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "-m", rm_spec, "-c", "none,profile", "--limit", "4", "-o", "runs", "--json"]
    assert run_cli(monkeypatch, *argv) == 0
    assert builds(tmp_path) == 2  # one RM per run: its counts in the summary are that run's alone
    first = capsys.readouterr().out
    assert [r["model_info"]["scored"] for r in json.loads(first)] == [8, 8]  # 4 pairs each, never 8 then 16
    monkeypatch.setenv("PRBENCH_TEST_REFUSE_BUILD", "1")
    assert run_cli(monkeypatch, *argv) == 0, capsys.readouterr().err
    again = capsys.readouterr()
    assert builds(tmp_path) == 2 and again.err.count("reused:") == 2
    assert '"accuracy"' in first and again.out.count('"path"') == first.count('"path"') == 2


def test_evaluate_builds_a_spec_once_for_a_list_of_conditions_and_never_for_finished_runs(
        rm_spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = prbench.evaluate(rm_spec, "sample", ["none", "profile"], out="runs", limit=4)
    assert [r.summary.condition for r in made] == ["none", "profile"] and builds(tmp_path) == 2
    monkeypatch.setenv("PRBENCH_TEST_REFUSE_BUILD", "1")
    back = prbench.evaluate(rm_spec, "sample", ["none", "profile"], out="runs", limit=4)
    assert all(r.reused for r in back) and [r.summary for r in back] == [r.summary for r in made]
    with pytest.raises(RuntimeError, match="built while reading back"):  # the refusal is real: a new run builds
        prbench.evaluate(rm_spec, "sample", "none", out="runs", limit=6)


def test_a_handle_builds_one_rm_per_run_and_is_named_as_its_rm_reports_itself(
        rm_spec: str, tmp_path: Path) -> None:
    handle = _evaluate.ModelHandle(rm_spec)
    for cond in ("none", "profile"):
        prbench.evaluate(handle, "sample", cond, out="runs", limit=3)
    assert builds(tmp_path) == 2 and handle.built is not None and handle.built.name == handle.name
    assert base.rm_name("judge:builtin:x", {"mode": "pointwise"}) == "judge[pointwise]:builtin:x"
    assert base.rm_name("judge:builtin:x", {"mode": "likelihood", "debias_position": True}) == \
        "judge[likelihood-debiased]:builtin:x"
    assert base.rm_name("lik:builtin:x", {"normalize": "sum"}) == "lik[sum]:builtin:x"
    assert base.rm_name("baseline:embedding", {"encoder": "hf:e"}) == "baseline:embedding@hf:e"
    assert base.rm_name("baseline:length") == "baseline:length"


def test_options_are_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`prbench eval -M` options go through the kind's check once (the evaluator's batch size and seed apart)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[dict] = []
    real = base.check_options

    def counting(registry, spec, options, **kw):
        seen.append(dict(options))
        return real(registry, spec, options, **kw)

    monkeypatch.setattr(base, "check_options", counting)
    argv = ["eval", "-m", "baseline:embedding", "-M", "encoder=builtin:minilm-l6", "-c", "none,profile",
            "--limit", "2", "-o", "runs", "-q"]
    assert run_cli(monkeypatch, *argv) == 0, capsys.readouterr().err
    assert [o for o in seen if "encoder" in o] == [{"encoder": "builtin:minilm-l6"}]
    with pytest.raises(prbench.errors.SpecError, match="did you mean 'encoder'"):
        _evaluate.ModelHandle("baseline:embedding", {"encodr": "x"})


def test_a_model_spec_is_parsed_once_per_run_of_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`prbench eval -m SPEC`: the spec is parsed and its kind looked up once (`preflight.model_specs` ->
    `prbench.specs.ModelSpec`), and the options, the run name and the model take that parse; before, the
    preflight, `-M`'s check and the handle (once more per run that built the RM) each parsed it again."""
    from prbench import specs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    parsed: list[str] = []
    real = specs._factory

    def counting(registry, spec):
        parsed.append(spec)
        return real(registry, spec)

    monkeypatch.setattr(specs, "_factory", counting)
    argv = ["eval", "-m", "baseline:embedding", "-M", "encoder=builtin:minilm-l6", "-c", "none,profile",
            "--limit", "2", "-o", "runs", "-q"]
    assert run_cli(monkeypatch, *argv) == 0, capsys.readouterr().err
    assert parsed.count("baseline:embedding") == 1, parsed
    with pytest.raises(prbench.errors.SpecError, match="did you mean 'encoder'"):  # the same message as before
        _evaluate.ModelHandle(specs.parse_spec(prbench.registry.REWARDS, "baseline:embedding"), {"encodr": "x"})


def test_evaluate_says_one_result_for_one_condition_and_a_list_for_a_list() -> None:
    one, many, models = typing.get_overloads(prbench.evaluate)
    assert typing.get_type_hints(one)["return"] is _evaluate.EvalResult
    assert typing.get_type_hints(many)["return"] == list[_evaluate.EvalResult]
    assert typing.get_type_hints(models)["return"] == list[_evaluate.EvalResult]  # a list of models
