"""scripts/gpu_check.sh: valid bash, and its CPU dry mode runs every check with one PASS line each.

The dry mode uses the stand-in vllm module (prbench.testing.fake_vllm, the real field lists) and
tiny models; it checks the wiring of the GPU checks, not their numbers (those need a GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
CHECKS = ("hf_bf16_vs_fp32", "throughput", "rl_grpo_one_step", "vllm_generate", "vllm_loglik", "vllm_pooling",
          "vllm_prefix_cache")


def test_bash_syntax_and_usage() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    bad = subprocess.run(["bash", str(SCRIPT), "--gpus", "2"], check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown argument --gpus" in bad.stderr


def test_cpu_dry_mode_runs_every_check(tmp_path: Path) -> None:
    results = tmp_path / "results.md"
    env = {**os.environ, "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(SCRIPT), "--cpu", "--results", str(results)], check=False, capture_output=True,
                         text=True, env=env, timeout=400)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    assert [ln.split()[1].rstrip(":") for ln in lines] == list(CHECKS), run.stdout + run.stderr[-2000:]
    assert run.returncode == 0 and all(ln.startswith("PASS") for ln in lines), "\n".join(lines) + run.stderr[-2000:]
    text = results.read_text()
    assert "CPU dry mode" in text and "| tiny random Llama (CPU dry mode) |" in text
    assert all(ln in text for ln in lines)
