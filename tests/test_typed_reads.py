"""Issue 40 item 2: readers use the summary models, never a summary's or metrics' dict.

Read as source (ast), like tests/test_structure.py: in the readers (report/, meta/, leaderboard.py,
eee.py) no code touches a run's raw summary (`Run.summary`) or downstream extras
(`DownstreamResult.extra`), and no `.get(` is called on anything named like a summary, its metrics,
a validity card or a cost. `records.typed_summary` is the one place that reads a summary dict (it
upgrades format-0 folders); every other reader gets the kind's model from `Run.summary_as`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "prbench"
READERS = [*sorted((PKG / "report").glob("*.py")), *sorted((PKG / "meta").glob("*.py")), PKG / "leaderboard.py",
           PKG / "eee.py"]
RAW = {"summary", "extra"}  # Run.summary (the dict as written), DownstreamResult.extra (its free-form fields)
SUMMARY_LIKE = re.compile(r"summary|metrics\b|validity|\bcost\b|\bextra\b|\bmm?\b|\bs\b|\bsumm\b")


def _offences(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in RAW and isinstance(node.ctx, ast.Load):
            out.append(f"{path.name}:{node.lineno}: .{node.attr} (the raw dict)")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and SUMMARY_LIKE.search(ast.unparse(node.func.value))):
            out.append(f"{path.name}:{node.lineno}: {ast.unparse(node.func)}(...)")
    return out


def test_readers_use_the_summary_models() -> None:
    offences = [o for p in READERS for o in _offences(p)]
    assert not offences, "\n".join(offences)


def test_the_check_finds_what_it_forbids(tmp_path: Path) -> None:
    """The rule itself: each way of reading a summary as a dict is caught (so the test above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(run, s, m):\n    a = run.summary['metrics']\n    b = s.get('accuracy')\n"
                   "    c = m.get('ci_low')\n    d = run.downstream.extra\n    e = r.summary_as(X).validity.get('gain')\n")
    assert sorted(o.split(": ", 1)[0] for o in _offences(bad)) == ["bad.py:2", "bad.py:3", "bad.py:4", "bad.py:5",
                                                             "bad.py:6"]


def test_only_the_legacy_reader_reads_summary_dicts() -> None:
    """`typed_summary` validates every kind's summary; `Run.summary_as` hands readers the model."""
    from prbench.runkinds.base import Run, RunKind
    from prbench.store.records import EvalSummary, typed_summary

    raw = {"model": "m", "data": "d", "condition": "none", "kind": "pointwise", "accuracy": 0.5, "n": 2,
           "n_total": 2, "metrics": {"accuracy": 0.5, "n": 2, "n_invalid": 0}}  # format 0: no stamp
    typed = typed_summary(raw)
    assert isinstance(typed, EvalSummary) and typed.run == "eval" and typed.metrics.accuracy == 0.5
    run = Run(Path("x"), RunKind(), raw, typed=typed)
    assert run.summary_as(EvalSummary) is typed and run.key == "m"


def test_evaluate_returns_the_models_the_reader_validates(tmp_path: Path) -> None:
    """#49: `evaluate()` gives the typed summary and records (what `open_run` gives), the file unchanged."""
    import json

    from prbench import evaluate
    from prbench.runkinds import open_run
    from prbench.store.records import EvalSummary, PointwiseRecord

    res = evaluate("baseline:length", "sample", "profile", out=tmp_path, limit=6, n_boot=20)
    assert isinstance(res.summary, EvalSummary) and all(isinstance(r, PointwiseRecord) for r in res.records)
    assert res.path is not None
    run = open_run(res.path)
    assert res.summary == run.typed and res.records == run.items
    assert res.summary.metrics.ci_low is not None and res.summary.metrics.ci_low == run.typed.metrics.ci_low
    written = json.loads((res.path / "summary.json").read_text(encoding="utf-8"))
    assert res.written == written  # summary.json's object as built (the file sorts its keys)
    again = evaluate("baseline:length", "sample", "profile", out=tmp_path, limit=6, n_boot=20)
    assert again.reused and again.summary == res.summary and again.records == res.records


def test_run_reads_fields_by_attribute_never_by_name() -> None:
    """`Run.get(name)` and the dict records are gone; a kind's group or label field must exist on its model."""
    import pytest

    from prbench.runkinds.base import Run, RunKind
    from prbench.runkinds.downstream import DownstreamKind
    from prbench.store.records import EvalSummary

    assert not hasattr(Run, "get") and not hasattr(Run, "records")
    with pytest.raises(TypeError, match="'conditon'.*DownstreamSummary"):
        type("Misspelt", (DownstreamKind,), {"name": "misspelt", "group_fields": ("conditon",)})
    with pytest.raises(TypeError, match="'temprature'.*EvalSummary"):
        type("Label", (RunKind,), {"name": "label", "summary_model": EvalSummary,
                                   "label_fields": (("t", "temprature"),)})
    with pytest.raises(TypeError, match="no model"):
        type("Bare", (RunKind,), {"name": "bare", "group_fields": ("data",)})
    ok = type("Fine", (DownstreamKind,), {"name": "fine", "group_fields": ("condition", "temperature")})
    assert ok.fields_model().__name__ == "DownstreamSummary"
