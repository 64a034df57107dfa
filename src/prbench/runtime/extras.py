"""Import optional dependencies with a message that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from prbench.errors import MissingExtra


def require(module: str, extra: str) -> ModuleType:
    """Import `module` or fail with one line naming `pip install prbench[extra]`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # only a missing top-level package is the extra's fault
        if exc.name and exc.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtra(module, extra) from None
