"""Studies: config validation with YAML lines, resume without redoing work, change reruns only what changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.errors import DataError
from prbench.study.config import load_study_config, parse_study
from prbench.study.runner import plan_study, run_study
from prbench.testing.records import make_records

STUDY = """\
name: tiny
data: bench.jsonl
out: study-out
conditions: [none, oracle]
models:
  - spec: baseline:length
  - spec: baseline:lexical
stages: [eval]
"""


@pytest.fixture()
def study_dir(tmp_path: Path) -> Path:
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_records(9)), encoding="utf-8")
    (tmp_path / "study.yaml").write_text(STUDY, encoding="utf-8")
    return tmp_path


def summaries(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("summary.json")}


@pytest.mark.parametrize("text, line, field", [
    (STUDY.replace("conditions: [none, oracle]", "conditions: [none, oracel]"), 4, "conditions"),
    (STUDY.replace("  - spec: baseline:lexical", "  - spec: baseline:lexical\n    option: {a: 1}"), 8, "models.1.option"),
    (STUDY.replace("name: tiny\n", ""), 1, "name"),
    (STUDY.replace("stages: [eval]", "stages: [eval, dance]"), 8, "stages.1"),
])
def test_config_errors_point_at_the_yaml_line(text: str, line: int, field: str) -> None:
    with pytest.raises(DataError) as err:
        parse_study(text, "study.yaml")
    assert (err.value.line, err.value.field) == (line, field), str(err.value)


def test_invalid_yaml_names_the_line() -> None:
    with pytest.raises(DataError, match=r"study.yaml:3: invalid YAML"):
        parse_study("name: x\nmodels:\n  - spec: a: b\n", "study.yaml")


def test_resume_skips_finished_runs_and_change_reruns_only_that_model(study_dir: Path) -> None:
    cfg, root = load_study_config(study_dir / "study.yaml")
    # a study killed after its first model: only that model's runs exist
    first = cfg.model_copy(update={"models": cfg.models[:1]})
    run_study(first, root, quiet=True)
    before = summaries(study_dir / "study-out")
    assert len(before) == 2
    run_study(cfg, root, quiet=True)  # resume: the finished runs are not redone
    after = summaries(study_dir / "study-out")
    assert len(after) == 4 and all(after[k] == v for k, v in before.items())
    # change one model's options: only its runs are computed again
    changed = cfg.model_copy(deep=True)
    changed.models[1].options = {"seed": 1}
    run_study(changed, root, quiet=True)
    final = summaries(study_dir / "study-out")
    assert len(final) == 6 and all(final[k] == v for k, v in after.items())


def test_dry_run_plans_without_running(study_dir: Path) -> None:
    cfg, root = load_study_config(study_dir / "study.yaml")
    runs = plan_study(cfg, root)
    assert [r.what for r in runs] == ["baseline:length [none]", "baseline:length [oracle]",
                                      "baseline:lexical [none]", "baseline:lexical [oracle]"]
    assert not (study_dir / "study-out").exists()


@pytest.mark.parametrize("preset", ["personalized-rewardbench", "rm-selection-crisis", "demo"])
def test_paper_presets_dry_run_offline(preset: str) -> None:
    res = subprocess.run([sys.executable, "-m", "prbench", "study", "--preset", preset, "--dry-run", "--json"],
                         check=False, capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan and all({"stage", "what", "model_calls", "tokens"} <= set(p) for p in plan)
    if preset == "personalized-rewardbench":
        assert sum(p["model_calls"] for p in plan if p["stage"] == "eval") > 50_000


def test_cli_study_runs_a_config_and_lists_presets(study_dir: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "prbench", "study", str(study_dir / "study.yaml"), "--json"],
                         check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["eval"]) == 4
    listed = subprocess.run([sys.executable, "-m", "prbench", "study", "--list", "--json"], check=False, capture_output=True, text=True)
    assert {"demo", "personalized-rewardbench", "rm-selection-crisis"} <= set(json.loads(listed.stdout))


def test_study_values_fill_what_a_stage_section_leaves_unset(study_dir: Path) -> None:
    """The study's seed, limit and top_k reach the driver settings of every section that does not set its own,
    also after the specs are resolved (loading from a file)."""
    from prbench.capabilities.rgd.settings import RGDSettings, RGDStage
    from prbench.capabilities.rl.settings import RLSettings, RLStage
    from prbench.config import SampleSettings
    from prbench.study.config import SampleStage
    from prbench.study.context import StudyContext
    from prbench.study.stages import study_defaults

    (study_dir / "study.yaml").write_text(STUDY.replace("stages: [eval]", """\
seed: 3
limit: 4
top_k: 5
sample: {policy: "openai:m", n: 2}
rgd: {policy: "openai:m", rms: [baseline:length], top_k: 2}
rl: {policy: "openai:m", rms: [baseline:length], seed: 0}
"""), encoding="utf-8")
    cfg, root = load_study_config(study_dir / "study.yaml")
    ctx = StudyContext(cfg, root)
    sample = study_defaults(ctx, cfg.section("sample", SampleStage), SampleSettings)
    assert (sample.seed, sample.limit, sample.top_k, sample.n, sample.max_new_tokens) == (3, 4, 5, 2, 200)
    rgd = study_defaults(ctx, cfg.section("rgd", RGDStage), RGDSettings)
    assert (rgd.seed, rgd.limit, rgd.top_k) == (3, 4, 2)  # the section's own top_k wins
    rl = study_defaults(ctx, cfg.section("rl", RLStage), RLSettings)
    assert (rl.seed, rl.limit, rl.top_k) == (0, 4, 5)
