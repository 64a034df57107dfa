"""The report reads right at a glance (issue #33, point 7): a headline sentence, pairs per run,
a judge's mode tag and explained diagnostics, bold only for a best that beats the baselines and
chance, no empty placeholder sections, run folders that wrap instead of being clipped."""

from __future__ import annotations

import re
import sys
from unittest import mock

import pytest


def run_cli(*args: str) -> None:
    from prbench.cli import main

    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    from prbench.testing.openai_server import serve

    root = tmp_path_factory.mktemp("report_view")
    env = {"PRBENCH_CACHE_DIR": str(root / "cache"), "MY_KEY": "loopback-key"}
    with mock.patch.dict("os.environ", env), serve(lambda body: "Result: A") as server:  # always "A"
        run_cli("eval", "-m", "baseline:lexical", "-m", "baseline:length", "-c", "none,oracle", "--out",
                str(root / "runs"), "-q")
        run_cli("eval", "-m", "judge:openai:stand-in", "--base-url", server.base_url, "--api-key-env", "MY_KEY",
                "--both-orders", "-c", "none,oracle", "--limit", "6", "--out", str(root / "runs"), "-q")
        run_cli("report", str(root / "runs"), "-o", str(root / "report.html"), "-q")
    return (root / "report.html").read_text(encoding="utf-8")


def test_headline_never_crowns_the_always_a_judge_and_says_why(page: str) -> None:
    """Issue 50.2: the judge answering "A" to every item (kappa 0) was "the best reward model"; now the headline
    asks whether an RM uses the person, names no best, and gives the judge with the reason."""
    person, best, *judges = re.findall(r'<p class="headline[^"]*">(.*?)</p>', page)
    assert "does an RM use the person? not measured" in person  # no run has its wrong-profile control here
    assert "no reward model (not a baseline) is named best" in best and "stand-in" not in best
    assert "the best baseline, baseline:lexical under oracle" in best
    for judge in judges:
        assert re.search(r"not named best: <b>judge[^<]*:openai:stand-in \(both orders\)</b> under (none|oracle), "
                         r"[0-9.]+ \[[0-9., ]+\] % on 6 pairs: answers &quot;A&quot; on 100% of 6 items; kappa 0.00 with "
                         "the labels", judge), judge
    assert len(judges) == 2 and page.count('class="headline warn"') == 2  # under none and oracle


def test_pairs_per_run_are_per_model_and_the_card_gives_the_range(page: str) -> None:
    assert '<div class="v">6–63</div><div class="k">pairs per run</div>' in page
    board = page.split('<section id="leaderboard">')[1].split("</section>")[0]
    rows = re.findall(r"<tr[^>]*><td class=\"model\">(.*?)</td><td class=\"num\">(\d+)</td>", board)
    pairs = {re.sub("<.*", "", name): n for name, n in rows}
    assert pairs["baseline:lexical"] == "63" and [n for name, n in pairs.items() if "stand-in" in name] == ["6"]


def test_the_judge_carries_its_order_tag_and_its_diagnostics_are_explained(page: str) -> None:
    diag = page.split('<section id="diagnostics">')[1].split("</section>")[0]
    assert "stand-in (both orders)" in diag
    assert "says A = 100% and consistent = 0%" in diag  # what an always-"A" judge's row means, said beside it


def test_bold_only_for_a_best_that_beats_the_baselines_and_chance(page: str) -> None:
    board = page.split('<section id="leaderboard">')[1].split("</section>")[0]
    assert 'class="num best"' not in board  # the always-"A" judge is at chance, below baseline:lexical


def test_sections_without_data_are_one_line_not_placeholders(page: str) -> None:
    toc = re.search(r'<nav class="toc">(.*?)</nav>', page).group(1)
    assert "Best-of-N" not in toc and "Meta-evaluation" not in toc and "Leaderboard" in toc
    assert '<section id="bon">' not in page and '<p class="empty">' not in page
    [absent] = re.findall(r'<p class="absent">(.*?)</p>', page)
    for sid in ("build", "bon", "rl-rgd", "meta", "published"):
        assert f'<span id="{sid}">' in absent  # the ids stay, so links to them still land


def test_run_folders_wrap_instead_of_being_clipped(page: str) -> None:
    css = re.search(r"<style>(.*?)</style>", page, flags=re.DOTALL).group(1)
    rules = [r for r in re.findall(r"td\.path \{([^}]*)\}", css)]
    assert any("overflow-wrap: anywhere" in r for r in rules) and 'class="path"' in page


def test_scatter_labels_point_inwards_and_never_share_a_line_where_they_would_meet() -> None:
    from prbench.report.plots import _label_offsets

    # the demo's meta panel: two RMs on one downstream score, left and right, whose labels met in the middle
    pts = [("baseline:lexical", 39.7, 0.5), ("baseline:length", 50.0, 0.5), ("baseline:embedding", 36.5, 0.458),
           ("baseline:random", 49.2, 0.458), ("pmi:builtin:smollm2-135m-instruct", 45.0, 0.3)]
    placed = {rm: (dy, left) for rm, _, _, dy, left in _label_offsets(pts)}
    assert placed["baseline:length"][1] and not placed["baseline:lexical"][1]  # the right one's label to its left
    assert placed["baseline:length"][0] != placed["baseline:lexical"][0]  # so it moves down a line
    assert placed["baseline:random"][0] != placed["baseline:embedding"][0]
