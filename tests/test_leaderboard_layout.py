"""Issue 50.3: the leaderboard as the demo leaves it, and a summary that names what changes its numbers.

The demo's final table was over 200 columns wide, listed every model twice (n = 63, and n = 12 under
`planner`: the planner file split each model's identity), showed an absolute planner path, in no evident order;
and `baseline:lexical [profile]` read 61.9 in the demo and 65.1 in the quick start with nothing shown but
config.json (top_k 5 vs 10). Now: one row per model x condition x the settings that differ (a setting only where
it acts: the planner file on `planner` rows, top_k on the profile ones), named by file name, sorted by condition
then accuracy, 120 columns by default and every column with `--wide`; the summary carries top_k and the other
settings that change the numbers.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from unittest import mock

import pytest

from prbench.testing.cli import run_ok as run_cli


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and headlines at a fixed width (COLUMNS), whatever the terminal or an earlier test left."""
    monkeypatch.setenv("COLUMNS", "200")

MODELS = ("baseline:lexical", "baseline:embedding")




@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's shape (top_k 5, 24 pairs, planner on 12 of them from an absolute path) and, beside it, the quick
    start's lexical baseline (top_k 10)."""
    from prbench.data.loaders import iter_examples

    root = tmp_path_factory.mktemp("layout")
    plan = root / "plan" / "planner.jsonl"
    plan.parent.mkdir()
    plan.write_text("".join(json.dumps({"id": ex.id, "aspects": [{"aspect": "be concrete", "reason": "asked"}]}) + "\n"
                            for ex in iter_examples("sample")), encoding="utf-8")
    with mock.patch.dict("os.environ", {"PRBENCH_CACHE_DIR": str(root / "cache")}):
        from prbench.cli import main

        models = [a for m in MODELS for a in ("-m", m)]
        for args in ([*models, "-c", "none,profile,wrong-profile", "--top-k", "5", "--limit", "24", "--out",
                      str(root / "runs" / "demo")],
                     [*models, "-c", "planner", "--planner-file", str(plan.resolve()), "--top-k", "5", "--limit", "12",
                      "--out", str(root / "runs" / "demo")],
                     ["-m", "baseline:lexical", "-c", "profile", "--limit", "24", "--out", str(root / "runs" / "quick")]):
            with mock.patch.object(sys, "argv", ["prbench", "eval", *args, "-q"]):
                try:
                    main()
                except SystemExit as exc:
                    assert exc.code in (0, None)
    return root


def test_one_row_per_model_condition_and_differing_settings_sorted(demo: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "leaderboard", str(demo / "runs"))
    shown = [ln for ln in out.splitlines() if not ln.startswith("wrote ")]  # the files' own paths are this machine's
    assert max(len(ln) for ln in shown) <= 120, max(shown, key=len)
    assert str(demo) not in "\n".join(shown)  # no absolute path: the planner file by its name
    rows = json.loads((demo / "runs" / "leaderboard.json").read_text())["rows"]
    keys = [(r["model"], r["condition"], r["settings"].get("top_k")) for r in rows]
    assert len(keys) == len(set(keys)) == 9  # 2 models x 4 conditions, and the quick start's top_k 10 profile row
    assert {k for k in keys if k[1] == "profile"} == {("baseline:lexical", "profile", 5),
                                                      ("baseline:embedding", "profile", 5),
                                                      ("baseline:lexical", "profile", 10)}
    planner = [r for r in rows if r["condition"] == "planner"]
    assert {r["n_total"] for r in planner} == {12} and {r["n_total"] for r in rows if r not in planner} == {24}
    assert all("planner_file" not in r["settings"] for r in rows if r not in planner)  # acts on planner rows only
    assert all("top_k" not in r["settings"] for r in rows if r["condition"] in ("none", "planner"))
    # sorted: by condition in the toolkit's order, then accuracy, best first
    conds = [r["condition"] for r in rows]
    assert conds == sorted(conds, key=["none", "profile", "planner", "wrong-profile"].index)
    for c in set(conds):
        accs = [r["cells"][c]["accuracy"] for r in rows if r["condition"] == c]
        assert accs == sorted(accs, reverse=True)
    lines = [ln for ln in shown if ln.startswith("│ baseline:")]
    assert sum("top_k=5" in ln for ln in lines) == 4 and sum("top_k=10" in ln for ln in lines) == 1
    assert not any("planner_file" in ln for ln in lines)  # one planner file for every planner row: nothing differs
    assert "rows by condition" in " ".join(out.split())  # the order is said
    with (demo / "runs" / "leaderboard.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert {r["planner_file"] for r in table if r["condition"] == "planner"} == {"planner.jsonl"}
    assert "resolves (pts)" not in out


def test_wide_shows_every_column(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "leaderboard", str(demo / "runs"), "--wide")
    assert "resolves (pts)" in out and " p=" in out  # the gain's p-value and the resolvable difference
    assert max(len(ln) for ln in out.splitlines() if not ln.startswith("wrote ")) > 120


def test_the_summary_carries_the_settings_that_change_its_numbers(demo: Path) -> None:
    from prbench.runkinds import scan_runs
    from prbench.store.records import EvalSummary

    runs = scan_runs([demo / "runs"]).of("benchmark")
    got = {(r.summary_as(EvalSummary).model, r.condition, r.path.parts[-4]): r.summary_as(EvalSummary).settings
           for r in runs}
    lex_demo, lex_quick = got[("baseline:lexical", "profile", "demo")], got[("baseline:lexical", "profile", "quick")]
    assert lex_demo is not None and lex_quick is not None
    assert (lex_demo.top_k, lex_quick.top_k) == (5, 10) and lex_demo.retriever == "bm25" and lex_demo.limit == 24
    planner = got[("baseline:lexical", "planner", "demo")]
    assert planner is not None and Path(planner.planner_file or "").name == "planner.jsonl"


def test_a_differing_path_is_shown_by_its_file_name() -> None:
    from prbench.leaderboard import setting_text

    assert setting_text("planner_file", "/home/me/study/plan/planner.jsonl", None) == \
        "planner_file=planner.jsonl/default"
    assert setting_text("top_k", 5, 10) == "top_k=5/10" and setting_text("retriever", "dense:all-MiniLM") == \
        "retriever=dense:all-MiniLM"
