"""prbench: does a reward model know *this* user, and does that predict what it does downstream?"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "evaluate", "load_examples"]


def __getattr__(name: str):
    # Lazy so that `import prbench` stays light (no torch, no datasets) until used.
    if name == "load_examples":
        from prbench.data import load_examples

        return load_examples
    if name == "evaluate":
        # The driver module itself is callable (it calls its `evaluate` function), because any
        # `import prbench.evaluate` rebinds this package attribute to the module anyway.
        import prbench.evaluate

        return prbench.evaluate
    raise AttributeError(name)
