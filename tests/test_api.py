"""The Python API is discoverable: the public functions are exported from `prbench` with `__all__`,
each has a docstring (what the API reference page renders), and `import prbench` stays light."""

from __future__ import annotations

import subprocess
import sys

import prbench


def test_every_public_name_resolves_and_says_what_it_does() -> None:
    for name in ("evaluate", "load_examples", "write_examples", "sample_policy", "best_of_n", "run_rgd",
                 "policy_accuracy", "run_icl", "meta_evaluate", "leaderboard", "compare_runs", "build_report"):
        assert name in prbench.__all__, name
    for name in prbench.__all__:
        obj = getattr(prbench, name)
        if name != "__version__":
            assert (getattr(obj, "__doc__", None) or "").strip(), f"prbench.{name} has no docstring"
    assert set(prbench.__all__) <= set(dir(prbench))
    assert set(prbench.__all__) == {"__version__", *prbench._EXPORTS}  # one list, no stale name


def test_import_prbench_loads_no_heavy_dependency() -> None:
    code = "import sys, prbench; print(sorted(m for m in ('torch', 'datasets', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_evaluate_takes_a_list_of_conditions(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    results = prbench.evaluate("baseline:lexical", "sample", ["none", "oracle"], out=tmp_path / "runs", limit=8)
    assert [r.summary.condition for r in results] == ["none", "oracle"]
    assert all(r.summary.n_total == 8 and r.path.name == r.summary.condition for r in results)
    single = prbench.evaluate("baseline:lexical", "sample", "oracle", out=tmp_path / "runs", limit=8)
    assert single.reused and single.summary == results[1].summary
