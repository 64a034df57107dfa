"""Study configs load bounded and fail early with one line (issue 21, point 3 and 5).

Alias bombs and huge numbers are refused before anything expands; counts are strict whole
numbers within ranges; each stage's sections and every model spec are checked before the first
model runs; `py:` paths are read from the config file's folder; a failed study leaves no folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from prbench.errors import DataError
from prbench.study.config import load_study_config, parse_study
from prbench.study.runner import plan_study, run_study
from prbench.testing.records import make_records

BASE = """\
name: t
data: bench.jsonl
out: study-out
conditions: [none]
models:
  - spec: baseline:length
  - spec: baseline:lexical
stages: [eval]
"""


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_records(6)), encoding="utf-8")
    return tmp_path


def third(spec: str) -> str:
    """BASE with a third model (YAML line 8)."""
    return BASE.replace("stages:", f"  - spec: {spec}\nstages:")


def bomb(levels: int) -> str:
    lines = ["      l0: &l0 [xxxxxxxxxxxxxxxx, xxxxxxxxxxxxxxxx, xxxxxxxxxxxxxxxx, xxxxxxxxxxxxxxxx]"]
    lines += [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return BASE.replace("  - spec: baseline:lexical\n", "  - spec: baseline:lexical\n    options:\n"
                        + "\n".join(lines) + "\n")


def test_alias_bomb_is_refused_before_expansion_with_bounded_memory(folder: Path) -> None:
    text = bomb(9)  # 9**8 * 4 strings if expanded
    assert len(text) < 1200
    tracemalloc.start()
    with pytest.raises(DataError) as err:
        parse_study(text, "study.yaml", folder)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (err.value.line, str(err.value).count("\n")) == (9, 0), str(err.value)
    assert "YAML anchors and aliases (&name, *name) are not allowed" in str(err.value)
    assert peak < 5 * 2**20, peak  # the expansion would need gigabytes
    (folder / "bomb.yaml").write_text(text, encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "prbench", "study", str(folder / "bomb.yaml"), "--dry-run"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith(f"error: {folder / 'bomb.yaml'}:9: YAML anchors")
    assert res.stderr.count("\n") == 1 and not (folder / "study-out").exists()


RGD = "rgd:\n  policy: builtin:smollm2-135m-instruct\n  rms: [baseline:length]\n  chunk: 0\n"
RL = "rl:\n  policy: builtin:smollm2-135m-instruct\n  rms: [baseline:length]\n  steps: {steps}\n{more}"  # RLSettings fields


@pytest.mark.parametrize("text, line, field, reason", [
    (BASE + "limit: 0\n", 9, "limit", "greater than or equal to 1"),
    (BASE + "limit: -5\n", 9, "limit", "greater than or equal to 1"),
    (BASE + "limit: 1e38\n", 9, "limit", "valid integer"),  # YAML 1.1 reads 1e38 as a string
    (BASE + "limit: 1.0e+38\n", 9, "limit", "valid integer"),
    (BASE + "limit: 5.0\n", 9, "limit", "valid integer"),
    (BASE + "seed: -1\n", 9, "seed", "greater than or equal to 0"),
    (BASE.replace("  - spec: baseline:lexical\n", "  - spec: baseline:lexical\n    limit: 0\n"), 8, "models.1.limit",
     "greater than or equal to 1"),
    (BASE.replace("[eval]", "[rgd]") + RGD, 12, "rgd.chunk", "greater than or equal to 1"),
    (BASE.replace("[eval]", "[rl]") + RL.format(steps=1000000000, more=""), 12, "rl.steps",
     "less than or equal to 1000000"),
    (BASE.replace("[eval]", "[rl]") + RL.format(steps=2, more="  num_generations: xxxxxxxx\n"), 13, "rl.num_generations",
     "valid integer"),
    (BASE.replace("[eval]", "[rl]") + RL.format(steps=2, more="  num_generations: 5000\n"), 13, "rl.num_generations",
     "less than or equal to 1024"),
    (BASE.replace("[eval]", "[eval, bon]") + "bon:\n  grader: embedding:builtin:minilm-l6\n", 8, "stages.1",
     "stage 'bon' needs a 'sample' section"),
    (BASE.replace("[eval]", "[eval, sample]"), 8, "stages.1", "stage 'sample' needs a 'sample' section"),
    (BASE.replace("[none]", "[none, planner]"), 4, "conditions", "condition 'planner' needs a 'planner' section"),
    (third("baseline:lenght"), 8, "models.2.spec", "unknown baseline 'lenght'"),
    (third("hff:org/model"), 8, "models.2.spec", "did you mean 'hf'?"),
    (third("judge:opena:gpt"), 8, "models.2.spec", "unknown engine 'opena'"),
    (third("bt:./not-trained"), 8, "models.2.spec", "./not-trained: no such file or folder"),
    (BASE.replace("[eval]", "[sample]") + "sample:\n  policy: hf:./no-such-policy\n", 10, "sample.policy",
     "no such file or folder"),
    (BASE + "retriever: bm52\n", 9, "retriever", "unknown retriever 'bm52'"),
    (BASE.replace("[eval]", "[rl]") + RL.format(steps=2, more="").replace("rl:\n", "rl:\n  condition: oracel\n"),
     10, "rl.condition", "unknown condition 'oracel'"),
])
def test_bad_values_fail_with_one_line_naming_line_and_field(folder: Path, text: str, line: int, field: str,
                                                             reason: str) -> None:
    with pytest.raises(DataError) as err:
        parse_study(text, "study.yaml", folder)
    assert (err.value.line, err.value.field) == (line, field), str(err.value)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_non_utf8_yaml_names_the_line(folder: Path) -> None:
    (folder / "s.yaml").write_bytes(BASE.replace("name: t", "name: t\ndescription: caf\xe9").encode("latin-1"))
    with pytest.raises(DataError, match=r"s.yaml:2: not UTF-8 text \(byte 0xe9\); save the file as UTF-8"):
        load_study_config(folder / "s.yaml")
    (folder / "big.yaml").write_text(BASE + "#" * (1 << 20), encoding="utf-8")
    with pytest.raises(DataError, match="at most 1024 KiB"):
        load_study_config(folder / "big.yaml")


def test_a_typo_in_the_third_model_fails_before_anything_runs(folder: Path) -> None:
    (folder / "s.yaml").write_text(third("hf:./missing-rm"), encoding="utf-8")
    for extra in ([], ["--dry-run"]):
        res = subprocess.run([sys.executable, "-m", "prbench", "study", str(folder / "s.yaml"), *extra],
                             check=False, capture_output=True, text=True, timeout=60, cwd=folder)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "s.yaml:8: models.2.spec: ./missing-rm: no such file or folder" in res.stderr
        assert not (folder / "study-out").exists()


PLUGIN = '''
from prbench.rewards.base import PointwiseRM, Score


class Words(PointwiseRM):
    calls_model = False

    def __init__(self, fail: bool = False, **_):
        if fail:
            raise RuntimeError("cannot load")

    def score(self, batch):
        return [Score(float(len(r.split()))) for _, r in batch]
'''


def test_py_paths_are_read_from_the_config_folder(folder: Path, tmp_path_factory: pytest.TempPathFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "plugins").mkdir()
    (folder / "plugins" / "words.py").write_text(PLUGIN, encoding="utf-8")
    (folder / "s.yaml").write_text(third("py:plugins/words.py:Words"), encoding="utf-8")
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))  # not the config's folder
    cfg, root = load_study_config(folder / "s.yaml")
    assert cfg.models[2].spec == f"py:{folder / 'plugins' / 'words.py'}:Words"
    assert len(plan_study(cfg, root)) == 3
    ctx = run_study(cfg, root, quiet=True)
    assert [r.accuracy is not None for r in ctx.outputs.eval or []] == [True] * 3


def test_a_model_that_fails_to_load_leaves_no_folder(folder: Path) -> None:
    (folder / "words.py").write_text(PLUGIN, encoding="utf-8")
    text = BASE.replace("  - spec: baseline:length\n", "  - spec: py:words.py:Words\n    options: {fail: true}\n")
    (folder / "s.yaml").write_text(text, encoding="utf-8")
    cfg, root = load_study_config(folder / "s.yaml")
    with pytest.raises(RuntimeError, match="cannot load"):
        run_study(cfg, root, quiet=True)
    assert not (folder / "study-out").exists(), list((folder / "study-out").rglob("*"))
