"""A trainable RM added in-tree as one module plus one line of `prbench/registry.py` (issue 49).

On a copy of `src/prbench`: docs/extending.md's `longer` module becomes `prbench/train/longer.py` (settings,
trainer, RM and `METHOD`, naming its objects as the built-in methods do) and `BUILTIN_METHODS` gets one line.
The same commands as the plug-in's (tests/test_plugin_method.py) then train it, evaluate its folder as
`longer:FOLDER`, and run a study of it through meta and the report: no second registration (no `REWARDS` line,
no CLI table, no study field).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from test_plugin_method import PLUGIN, install_metric, trains_evaluates_and_reaches_a_study_and_the_report

SRC = Path(__file__).resolve().parents[1] / "src"
LINE = '    "longer": "prbench.train.longer:METHOD",\n'


def intree_module() -> str:
    """The page's plug-in module, its `Method` naming the module's own objects instead of `prbench_longer:` targets."""
    code, n = re.subn(r'"prbench_longer:(\w+)"', r"\1", PLUGIN)
    assert n == 3 and "prbench_longer" not in code
    return code


def test_one_module_and_one_registry_line_train_evaluate_and_reach_a_study_and_the_report(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(SRC / "prbench", tree / "prbench", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "prbench" / "train" / "longer.py").write_text(intree_module(), encoding="utf-8")
    registry = tree / "prbench" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    assert "\nBUILTIN_METHODS = {\n" in text, "registry.py lists no built-in training methods: no line to add"
    registry.write_text(text.replace("\nBUILTIN_METHODS = {\n", "\nBUILTIN_METHODS = {\n" + LINE, 1), encoding="utf-8")
    site = tmp_path / "site"
    install_metric(site)  # meta ranks RMs on a downstream setting: the page's plug-in metric, as beside the plug-in
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tree)]),
           "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}
    where = subprocess.run([sys.executable, "-c", "import prbench.train.longer as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout.strip()
    assert Path(where) == tree / "prbench" / "train" / "longer.py"  # the copy, not the checkout, is what runs
    trains_evaluates_and_reaches_a_study_and_the_report(env, tmp_path)
