"""Issue 41 items 4 and 8, as a reader sees them: the report's chart labels whole and apart in a 3-model
report, the "best" badge off the number's line, run settings shown where they differ; and, where chromium is
installed, the same report laid out by a real browser at 1,000 and 1,400 px."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prbench.meta.result import CrossBenchmark
from tests.test_meta import write_eval_run

JUDGE = "judge[likelihood]:smollm2-135m-instruct (both orders)"
MODELS = [JUDGE, "baseline:embedding", "baseline:lexical"]
CONDS = ["none", "profile", "wrong-profile"]


def test_three_model_chart_labels_are_whole_and_never_overlap() -> None:
    """The demo's three models: the judge's label was cut ("judge[likelihood]:smollm2-1...") and the labels met."""
    pytest.importorskip("matplotlib")
    from prbench.report import plots

    vals = {(m, c): (60.0 + i, 50.0, 70.0) for i, (m, c) in enumerate(itertools.product(MODELS, CONDS))}
    fig = plots.bars_figure(MODELS, CONDS, vals, ylabel="accuracy (%)", chance=50.0)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = fig.axes[0].get_xticklabels()
    assert [t.get_text().replace("\n", "") for t in ticks] == MODELS  # whole names, only line breaks added
    boxes = [t.get_window_extent(renderer) for t in ticks]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    fig_box = fig.bbox
    assert all(b.x0 >= fig_box.x0 and b.x1 <= fig_box.x1 for b in boxes)  # inside the figure, not clipped


def _cross_entries() -> list[CrossBenchmark]:
    """A meta cross-benchmark comparison: benchmark a best on every metric."""
    metric = {"value": 0.8, "ci_low": 0.6, "ci_high": 0.9, "p_value": 0.01}
    low = {**metric, "value": 0.4}
    names = ("ndcg", "weighted_tau", "spearman", "rbo")
    rms = ["x", "y", "z"]
    return [CrossBenchmark.model_validate(
        {"setting": "bon", "same_rms": True, "best_overall": "a [none]", "best": dict.fromkeys(names, "a [none]"),
         "benchmarks": [{"benchmark": "a [none]", "data": "a", "condition": "none", "n_rms": 3, "rms": rms,
                         "metrics": dict.fromkeys(names, metric)},
                        {"benchmark": "b [none]", "data": "b", "condition": "none", "n_rms": 3, "rms": rms,
                         "metrics": dict.fromkeys(names, low)}]})]


def test_best_badge_sits_under_the_number_not_beside_it() -> None:
    from prbench.report.meta_section import cross_benchmark_html

    html = cross_benchmark_html(_cross_entries())
    cells = re.findall(r'<td class="num">(.*?)</td>', html)
    best = [c for c in cells if "badge" in c]
    assert len(best) == 4
    for c in best:  # the number first, the badge a block of its own after the CI and p: the digits stay aligned
        assert c.startswith("0.800<span") and c.endswith('<span class="badge ref under">best</span>')
    css = (Path(__file__).parents[1] / "src/prbench/report/style.css").read_text()
    assert re.search(r"\.badge\.under\s*\{[^}]*display:\s*table", css)


def _three_model_runs(root: Path) -> None:
    """Runs shaped like the demo's: three models under three conditions, the lexical one at top_k 5."""
    for i, m in enumerate(MODELS):
        for j, c in enumerate(CONDS):
            credits = [1.0 if (k + i + j) % 3 else 0.0 for k in range(12)]
            run = write_eval_run(root, m.split(" ")[0].replace("[likelihood]", ""), credits, condition=c,
                                 data="sample", model=m, n_boot=50)
            cfg = json.loads((run / "config.json").read_text())
            cfg.update(top_k=5 if m == "baseline:lexical" else 10, retriever="bm25")
            (run / "config.json").write_text(json.dumps(cfg))


def test_report_shows_settings_that_differ_and_full_chart_labels(tmp_path: Path) -> None:
    from prbench.report.html import build_report

    _three_model_runs(tmp_path / "runs")
    page = build_report(tmp_path / "runs", tmp_path / "r.html", n_boot=20, n_perm=20).read_text(encoding="utf-8")
    board = page.split('id="leaderboard"')[1].split("<section")[0]
    assert '<td class="settings">top_k=5</td>' in board and '<td class="settings">top_k=10</td>' in board
    assert "retriever=" not in board  # the same in every row: not shown


CHECK_JS = """
<script>
window.addEventListener('load', () => {
  const bad = [];
  for (const table of document.querySelectorAll('table')) {
    const edges = {};
    for (const td of table.querySelectorAll('tbody td.num')) {
      const node = td.firstChild;
      if (!node || node.nodeType !== 3 || !/\\d/.test(node.textContent)) continue;
      if (td.querySelector('.inline-ci')) continue;  // number and CI on one line: the pair is what aligns
      const range = document.createRange();
      range.selectNodeContents(node);
      const r = range.getBoundingClientRect();
      const col = td.cellIndex;
      (edges[col] = edges[col] || []).push([Math.round(r.right), Math.round(td.getBoundingClientRect().right)]);
    }
    for (const [col, list] of Object.entries(edges)) {
      const gaps = list.map(([text, cell]) => cell - text);
      if (Math.max(...gaps) - Math.min(...gaps) > 1.5)
        bad.push((table.closest('section') || {}).id + ' column ' + col + ': digits end ' + gaps.join('/') + ' px from the edge');
    }
  }
  for (const img of document.querySelectorAll('figure img')) {
    if (!img.complete || img.naturalWidth === 0) bad.push('an image did not load');
    if (img.getBoundingClientRect().right > document.documentElement.clientWidth + 1) bad.push('an image is cut');
  }
  document.body.setAttribute('data-layout', JSON.stringify(bad));
});
</script>
"""


@pytest.mark.parametrize("width", [1000, 1400])
def test_three_model_report_in_headless_chromium(tmp_path: Path, width: int) -> None:
    """Digits right-aligned in every numeric column (a badge beside a number breaks this), charts whole."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the layout check needs a browser")
    from prbench.report.html import build_report

    _three_model_runs(tmp_path / "runs")
    page = build_report(tmp_path / "runs", tmp_path / "r.html", n_boot=20, n_perm=20).read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    from prbench.report.meta_section import cross_benchmark_html

    probe.write_text(page.replace("</body>", cross_benchmark_html(_cross_entries()) + CHECK_JS + "</body>"),
                     encoding="utf-8")
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},2000",
                          "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r"data-layout=\"([^\"]*)\"", out)
    assert found, "the layout probe did not run"
    assert json.loads(found.group(1).replace("&quot;", '"')) == []


def test_two_runs_differing_only_in_top_k_are_two_rows_not_one(tmp_path: Path) -> None:
    """The demo (top_k 5) and the quick start (top_k 10) under one folder: before, one row kept whichever came last."""
    from prbench.leaderboard import leaderboard, render_rows

    for sub, k in (("demo", 5), ("quick", 10)):
        run = write_eval_run(tmp_path / sub, "baseline:lexical", [1.0] * k + [0.0] * 4, condition="profile",
                             data="sample", n_boot=20)
        cfg = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps({**cfg, "top_k": k}))
    rows = leaderboard(tmp_path)
    assert sorted((r.settings["top_k"], r.cells["profile"].n_total) for r in rows) == [(5, 9), (10, 14)]
    head, body = render_rows(rows)
    assert head[:3] == ["model", "condition", "settings"] and sorted(b[2] for b in body) == ["top_k=10", "top_k=5"]
