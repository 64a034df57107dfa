"""A third-party trainable RM as one module, declared by one `prbench.methods` entry point (issue 40).

The module is docs/extending.md's, taken from the page: settings, trainer, the RM its folders load as, and the
`Method` naming them. `prbench train longer` trains it, `longer:FOLDER` is a reward model for `prbench eval`,
a study, meta (ranked on the page's downstream metric, installed beside it) and the report, with no change to
prbench and no second registration.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
_SECTION = DOC.read_text(encoding="utf-8").split("## A trainable reward model", 1)[1].split("\n## ", 1)[0]
PLUGIN = re.search(r"```python\n(.*?)```", _SECTION, re.DOTALL).group(1)
ENTRY_POINTS = re.search(r"```toml\n(.*?)```", _SECTION, re.DOTALL).group(1)

STUDY = """\
name: longer
data: synth.jsonl
out: out
conditions: [none]
models:
  - spec: longer:model
  - spec: baseline:length
  - spec: baseline:lexical
stages: [eval, agree, meta, report]
agree: {rms: [longer:model, baseline:length, baseline:lexical]}
"""
# The page's downstream metric (`agree`), installed beside the method: meta ranks RMs on a downstream setting, and
# this one costs no sampling.
_METRIC = DOC.read_text(encoding="utf-8").split("## A run kind, and a downstream metric", 1)[1].split("\n## ", 1)[0]


def install(site: Path, dist: str, module: str, code: str, entry_points: str) -> tuple[str, str, str]:
    """A one-module distribution on `site` (its dist-info declaring the page's one entry point): (group, name,
    target) of that entry point."""
    (site / f"{dist}-0.1.dist-info").mkdir(parents=True)
    (site / f"{module}.py").write_text(code, encoding="utf-8")
    info = site / f"{dist}-0.1.dist-info"
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 0.1\n")
    group, name, target = re.search(r'entry-points\."([^"]+)"\]\s*(\w+) = "([^"]+)"', entry_points).groups()
    info.joinpath("entry_points.txt").write_text(f"[{group}]\n{name} = {target}\n")
    return group, name, target


def install_metric(site: Path) -> None:
    """The page's downstream metric (`agree`) as a plug-in: meta needs a downstream setting to rank RMs on."""
    install(site, "prbench_agree", "prbench_agree", re.search(r"```python\n(.*?)```", _METRIC, re.DOTALL).group(1),
            re.search(r"```toml\n(.*?)```", _METRIC, re.DOTALL).group(1))


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    group, name, _ = install(site, "prbench_longer", "prbench_longer", PLUGIN, ENTRY_POINTS)
    assert (group, name) == ("prbench.methods", "longer")  # one entry point: no `prbench.rewards` line
    install_metric(site)
    src = Path(__file__).resolve().parents[1] / "src"
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)]),
            "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}


def trains_evaluates_and_reaches_a_study_and_the_report(env: dict[str, str], tmp_path: Path) -> None:
    """`prbench train longer`, `prbench eval -m longer:model`, and a study of it through meta and the report."""
    def prbench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "prbench", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600, check=False)

    r = prbench("data", "synth-users", "synth.jsonl", "--users", "6", "--items-per-user", "6")
    assert r.returncode == 0, r.stderr
    assert "smoothing" in prbench("train", "longer", "--help").stdout
    r = prbench("train", "longer", "--data", "synth.jsonl", "--out", "model", "--no-protocol", "--json")
    assert r.returncode == 0, r.stderr
    weight = json.loads((tmp_path / "model" / "config.json").read_text())["weight"]
    assert -1 < weight < 1
    r = prbench("eval", "-m", "longer:model", "--data", "synth.jsonl", "-o", "runs", "--json")
    assert r.returncode == 0, r.stderr
    [summary] = json.loads(r.stdout)
    assert summary["model"] == "longer:model" and summary["n"] > 0
    (tmp_path / "study.yaml").write_text(STUDY, encoding="utf-8")
    r = prbench("study", "study.yaml", "--json")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "longer:model" in html
    meta = json.loads((tmp_path / "out" / "meta" / "meta.json").read_text())
    (row,) = [r for r in meta["rows"] if r["setting"]["setting"] == "agree"]
    assert row["n_rms"] == 3 and "longer:model" in json.dumps(row)  # the trained RM is one of the ranked


def test_one_module_trains_evaluates_and_reaches_a_study_and_the_report(env: dict[str, str], tmp_path: Path) -> None:
    trains_evaluates_and_reaches_a_study_and_the_report(env, tmp_path)
