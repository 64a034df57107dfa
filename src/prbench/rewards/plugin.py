"""`py:<file.py>:<Class>`: the user's own RM class from a Python file (this runs their code)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from prbench.errors import SpecError
from prbench.specs import Kind, OpenOptions, local_path


def _load_plugin(target: str, base_dir: str | Path | None = None, **options: Any):
    """Import `file.py` (relative to `base_dir` when given, e.g. a study file's folder) and build `Class`."""
    from prbench.rewards.base import PairwiseRM, PointwiseRM

    path, sep, cls_name = target.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise SpecError(f"py: spec must be py:<file.py>:<ClassName>, got py:{target}")
    file = Path(path)
    if base_dir is not None and not file.is_absolute():
        file = Path(base_dir) / file
    if not file.is_file():
        raise SpecError(f"py: plug-in file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"prbench_plugin_{file.stem}", file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise SpecError(f"py: {file} has no class {cls_name!r}")
    rm = cls(**options)
    if not isinstance(rm, (PointwiseRM, PairwiseRM)):
        raise SpecError(f"py: {cls_name} must subclass prbench.rewards.PointwiseRM or PairwiseRM")
    rm.spec = f"py:{target}"
    return rm


class PluginOptions(OpenOptions):
    """`base_dir` is prbench's; every other option goes to the user's class, which checks it."""

    base_dir: Path | str | None = None


def _resolve(rest: str, root: Path) -> str:
    file, sep, cls = rest.rpartition(":")
    if not sep or not file.endswith(".py") or not cls:
        raise SpecError(f"py: spec must be py:<file.py>:<ClassName>, got py:{rest}")
    return f"{local_path(file, root, True)}:{cls}"


load_plugin = Kind(_load_plugin, options_model=PluginOptions, resolve_spec=_resolve)
