"""prbench: does a reward model know *this* user, and does that predict what it does downstream?

The public API is re-exported here from private modules, lazily, so that `import prbench` stays
light (no torch, no datasets) until a name is used: `prbench.evaluate(...)` is always the function.
"""

from __future__ import annotations

from prbench.version import __version__

__all__ = [
    "EvalResult",
    "InvalidRunError",
    "__version__",
    "evaluate",
    "invalid_failure",
    "load_examples",
    "run_path",
    "summarize",
]


def __getattr__(name: str):
    if name == "load_examples":
        from prbench.data import load_examples

        return load_examples
    if name in __all__:
        from prbench import _evaluate

        return getattr(_evaluate, name)
    raise AttributeError(name)
