"""prbench: does a reward model know *this* user, and does that predict what it does downstream?

Every command is a function here (the CLI is a thin layer over them), re-exported lazily from
the modules that hold them, so `import prbench` stays light (no torch, no datasets) until a name
is used; `prbench.evaluate(...)` is always the function.

- evaluate: `evaluate` (one RM or several, one or several conditions, `until` to stop early -> `EvalResult`),
  `EvalSettings`,
  `invalid_failure`, `InvalidRunError`, `run_path`, `summarize`
- data: `load_examples`, `write_examples` (what `prbench data convert` does), `iter_examples`
- downstream: `sample_policy`, `read_samples`, `best_of_n`, `run_rgd`, `policy_accuracy`, `run_icl`, `train_rl`
- analysis: `meta_evaluate`, `leaderboard`, `compare_runs`, `build_report`
"""

from __future__ import annotations

from typing import Any

from prbench.version import __version__

# name -> "module:attribute", imported on first use
_EXPORTS = {
    "evaluate": "prbench.evaluation.evaluate:evaluate",
    "EvalResult": "prbench.evaluation.evaluate:EvalResult",
    "InvalidRunError": "prbench.errors:InvalidRunError",
    "invalid_failure": "prbench.evaluation.evaluate:invalid_failure",
    "run_path": "prbench.evaluation.evaluate:run_path",
    "summarize": "prbench.evaluation.evaluate:summarize",
    "EvalSettings": "prbench.capabilities.eval.settings:EvalSettings",
    "load_examples": "prbench.data:load_examples",
    "write_examples": "prbench.data:write_examples",
    "iter_examples": "prbench.data:iter_examples",
    "sample_policy": "prbench.capabilities.sample.driver:sample_policy",
    "read_samples": "prbench.downstream.sampling:read_samples",
    "best_of_n": "prbench.capabilities.bon.driver:best_of_n",
    "run_rgd": "prbench.capabilities.rgd.driver:run_rgd",
    "policy_accuracy": "prbench.capabilities.policy_accuracy.driver:policy_accuracy",
    "run_icl": "prbench.capabilities.icl.driver:run_icl",
    "train_rl": "prbench.capabilities.rl.driver:train_rl",
    "meta_evaluate": "prbench.meta:meta_evaluate",
    "leaderboard": "prbench.leaderboard:leaderboard",
    "compare_runs": "prbench.leaderboard:compare_runs",
    "build_report": "prbench.report:build_report",
}

__all__ = [  # noqa: RUF022 (grouped as the module doc lists them)
    "__version__", "evaluate", "EvalResult", "EvalSettings", "InvalidRunError", "invalid_failure", "run_path",
    "summarize", "load_examples", "write_examples", "iter_examples",
    "sample_policy", "read_samples", "best_of_n", "run_rgd", "policy_accuracy", "run_icl", "train_rl",
    "meta_evaluate", "leaderboard", "compare_runs", "build_report",
]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(name)
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
