"""One exception hierarchy: every user-facing error is a `prbench.errors.PrbenchError` with its exit code there,
and the modules that used to define them still hand out the same class (older imports keep working)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from prbench import errors

PKG = Path(__file__).resolve().parents[1] / "src" / "prbench"


def _error_classes_outside_errors_py() -> list[str]:
    out = []
    for path in PKG.rglob("*.py"):
        if path == PKG / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id in errors.__all__ for b in node.bases):
                out.append(f"{path.relative_to(PKG)}:{node.name}")
    return out


def test_every_prbench_error_lives_in_errors_py():
    assert _error_classes_outside_errors_py() == []


@pytest.mark.parametrize(("module", "name", "code"), [
    ("prbench.cost", "BudgetExceeded", 3),
    ("prbench.engines.batch", "BatchPending", 4),
    ("prbench.engines.batch", "BatchFailed", 2),
    ("prbench.engines.ratelimit", "QuotaExhausted", 2),
    ("prbench.store.runs", "RunBusy", 2),
    ("prbench.store.cache", "CacheError", 2),
    ("prbench.runkinds", "NotARun", 2),
    ("prbench.evaluation.evaluate", "InvalidRunError", 1),
    ("prbench", "InvalidRunError", 1),
])
def test_old_homes_re_export_the_one_class_with_its_exit_code(module, name, code):
    import importlib

    cls = getattr(importlib.import_module(module), name)
    assert cls is getattr(errors, name) and issubclass(cls, errors.PrbenchError)
    assert cls.exit_code == code


@pytest.mark.parametrize("name", ["BudgetExceeded", "BatchPending", "InvalidRunError", "SpecError"])
def test_the_cli_exits_with_the_errors_own_code(name):
    """`prbench.cli.main` turns any PrbenchError into one line on stderr and the class's exit code."""
    script = ("import sys; from prbench import errors; from prbench.cli import app, main\n"
              "@app.command('boom')\n"
              f"def boom() -> None:\n    raise errors.{name}('it broke')\n"
              "sys.argv = ['prbench', 'boom']; main()\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == getattr(errors, name).exit_code, res.stderr
    assert res.stderr == "error: it broke\n"
