"""A third-party downstream metric as one module, installed as a dist-info on the path (issues 28 and 40).

The module is docs/extending.md's, taken from the page: settings (`AgreeSettings`), driver (`run_agree`), study
stage, command, and the run kind (`AgreeKind`) carrying them, declared by one entry point in `prbench.runkinds`.
The study runs its stage, `prbench agree` is a command, meta ranks on it and the report shows it, with no change
to prbench.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from prbench.registry import RUNKINDS, STAGES
from prbench.testing.records import make_records

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
_SECTION = DOC.read_text(encoding="utf-8").split("## A run kind, and a downstream metric", 1)[1].split("\n## ", 1)[0]
PLUGIN = re.search(r"```python\n(.*?)```", _SECTION, re.DOTALL).group(1)  # the doc's module, as written there
ENTRY_POINTS = re.search(r"```toml\n(.*?)```", _SECTION, re.DOTALL).group(1)  # and its one entry point


STUDY = """\
name: plug
data: bench.jsonl
out: out
conditions: [none]
models:
  - spec: baseline:length
  - spec: baseline:lexical
  - spec: baseline:random
stages: [report, agree, eval, meta]
agree: {rms: [baseline:length, baseline:lexical, baseline:random]}
"""


def write_bench(folder: Path) -> None:
    """The benchmark both the plug-in's and the in-tree capability's tests run on (nine pairs)."""
    (folder / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_records(9)), encoding="utf-8")


def cli(env: dict[str, str], cwd: Path) -> Callable[..., subprocess.CompletedProcess]:
    """`prbench ARGS` in a fresh process with `env`, in `cwd`."""
    def prbench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "prbench", *args], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=300, check=False)
    return prbench


def check_agree_in_meta_and_report(out: Path, block: str = "<h3>Agreement with the user</h3>") -> None:
    """A study's meta ranks the three RMs on `agree`, and its report shows the kind's block."""
    meta = json.loads((out / "meta" / "meta.json").read_text())
    (row,) = [r for r in meta["rows"] if r["setting"]["setting"] == "agree"]
    assert row["n_rms"] == 3 and row["setting"]["label"] == "Agree [none]"
    assert meta["definitions"]["agree_value"].startswith("1 when the RM prefers")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert block in html and "Agree [none]" in html


@pytest.fixture()
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = tmp_path / "site"
    (site / "prbench_agree-0.1.dist-info").mkdir(parents=True)
    (site / "prbench_agree.py").write_text(PLUGIN, encoding="utf-8")
    (site / "prbench_agree-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: prbench-agree\nVersion: 0.1\n")
    group, name, target = re.search(r'entry-points\."([^"]+)"\]\s*(\w+) = "([^"]+)"', ENTRY_POINTS).groups()
    assert (group, name) == ("prbench.runkinds", "agree")  # the kind alone: no `prbench.stages` entry
    (site / "prbench_agree-0.1.dist-info" / "entry_points.txt").write_text(f"[{group}]\n{name} = {target}\n")
    monkeypatch.syspath_prepend(str(site))
    RUNKINDS.refresh()
    STAGES.refresh()
    yield site
    monkeypatch.undo()
    sys.modules.pop("prbench_agree", None)
    RUNKINDS.refresh()
    STAGES.refresh()


def test_plugin_metric_and_stage_run_in_a_study_and_reach_meta_and_report(installed: Path, tmp_path: Path) -> None:
    from prbench.study.config import load_study_config
    from prbench.study.runner import run_study

    assert "agree" in RUNKINDS and "agree" in STAGES and STAGES.get("agree") is RUNKINDS.get("agree").stage
    write_bench(tmp_path)
    (tmp_path / "study.yaml").write_text(STUDY, encoding="utf-8")
    cfg, root = load_study_config(tmp_path / "study.yaml")
    assert cfg.section("agree", RUNKINDS.get("agree").settings_model).rms == [
        "baseline:length", "baseline:lexical", "baseline:random"]
    ctx = run_study(cfg, root, quiet=True)
    assert list(ctx.outputs.timings or {}) == ["eval", "agree", "meta", "report"]  # ranks, not the listed order
    assert list(ctx.outputs.dump()) == ["eval", "agree", "meta", "report", "timings"] and ctx.outputs.plugins["agree"]
    check_agree_in_meta_and_report(tmp_path / "out")


def test_a_plugin_stage_section_is_validated_at_load(installed: Path, tmp_path: Path) -> None:
    from prbench.errors import DataError
    from prbench.study.config import parse_study

    with pytest.raises(DataError, match=r"study.yaml:10: agree.rms"):
        parse_study(STUDY.replace("agree: {rms: [baseline:length, baseline:lexical, baseline:random]}",
                                  "agree: {rms: 3}"), "study.yaml")
    with pytest.raises(DataError, match=r"stages.1: stage 'agree' needs a 'agree' section"):
        parse_study(STUDY.replace("agree: {rms: [baseline:length, baseline:lexical, baseline:random]}\n", ""),
                    "study.yaml")


def test_the_kind_is_a_command(installed: Path, tmp_path: Path) -> None:
    """`prbench agree` comes from the kind's `command`; its runs are read back by meta as an `agree` setting."""
    from prbench.meta import meta_evaluate

    write_bench(tmp_path)
    src = Path(__file__).resolve().parents[1] / "src"
    prbench = cli({**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(src)]),
                   "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)
    r = prbench("--help")
    assert r.returncode == 0 and re.search(r"^\s+agree\s+Agreement with the user", r.stdout, re.MULTILINE), r.stdout
    assert "--rm" in prbench("agree", "--help").stdout
    out = tmp_path / "runs" / "downstream" / "agree"
    r = prbench("eval", "-m", "baseline:length", "-m", "baseline:lexical", "-m", "baseline:random",
                "--data", "bench.jsonl", "-o", "runs", "-q")  # the benchmark side meta ranks against
    assert r.returncode == 0, r.stderr
    for rm in ("baseline:length", "baseline:lexical", "baseline:random"):
        r = prbench("agree", "--rm", rm, "--data", "bench.jsonl", "--out", str(out))
        assert r.returncode == 0, r.stderr
    res = meta_evaluate([tmp_path / "runs"], [out], seed=0)
    (row,) = [r for r in res.rows if r.setting.setting == "agree"]
    assert row.n_rms == 3
