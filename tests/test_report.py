"""The HTML report: built from fake runs, parsed with the stdlib parser, checked for content and safety."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_meta import credits_with_mean, values_with_mean, write_ds, write_eval_run, write_pa_run

from prbench.meta.result import MetaResult
from prbench.report import SECTIONS, build_report
from prbench.schema import CATEGORIES
from prbench.store.runs import write_json_atomic

SECTION_IDS = ["leaderboard", "conditions", "diagnostics", "build", "bon", "rl-rgd", "meta", "published", "provenance"]
EVIL = "<script>alert(1)</script>"
RMS = ["hf:org/good-rm", "judge:openai:gpt-x", EVIL, "baseline:length", "baseline:random"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Collects tags, attributes, ids, table cell text and inline <svg> sources."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = dict(attrs)
        self.tags.append((tag, d))
        if d.get("id"):
            self.ids.append(d["id"])  # type: ignore[arg-type]
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def build_build_report(path: Path) -> None:
    """A validation report shaped like build/report.py's output (two categories and 'all')."""
    def sec(kept: int) -> dict[str, Any]:
        scale = {"chosen": {"mean": 4.9, "min": 4.0, "max": 5.0, "n": kept},
                 "rejected": {"mean": 4.5, "min": 3.0, "max": 5.0, "n": kept}, "gap": 0.4}
        fit = {"chosen": {"mean": 4.8, "min": 4.0, "max": 5.0, "n": kept},
               "rejected": {"mean": 1.5, "min": 1.0, "max": 3.0, "n": kept}, "gap": 3.3}
        return {"processed": kept + 2, "kept": kept, "dropped": 2, "dropped_by_reason": {"rejected fits rubric": 2},
                "failed_checks": {"rejected fits rubric": 2},
                "scales_kept": {"factuality": scale, "relevance": scale, "helpfulness": scale, "rubric_fit": fit},
                "length_kept": {"n": kept, "chosen_longer": 0.5}, "generation": {"failed": 0},
                "validation": {"parse_failures": 1}}
    write_json_atomic(path / "build" / "report.json", {
        "rule": {"min_chosen_fit": 4}, "rule_text": "chosen fit >= 4 and rejected fit <= 2",
        "categories": {CATEGORIES[0]: sec(10), CATEGORIES[1]: sec(12)}, "all": sec(22)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report") / "runs"
    ids = [f"item-{i:03d}" for i in range(12)]
    accs = {"none": [9, 8, 7, 6, 6], "profile": [10, 7, 8, 6, 6], "oracle": [12, 11, 10, 6, 6],
            "wrong-profile": [8, 7, 6, 6, 6]}
    for cond, rights in accs.items():
        for rm, right in zip(RMS, rights):
            credits: list[float | None] = list(credits_with_mean(right, 12))
            if rm.startswith("judge:"):
                credits[-1] = None  # one unparseable verdict
            write_eval_run(root / "eval", rm, credits, ids=ids, condition=cond, data="sample",
                           pairwise=rm.startswith("judge:"))
    down = {"hf:org/good-rm": 1.6, "judge:openai:gpt-x": 1.1, EVIL: 1.3, "baseline:length": 0.6,
            "baseline:random": 0.8}
    for rm, v in down.items():
        if not rm.startswith("judge:"):  # a pairwise judge cannot pick among N
            per = {i: {1: 0.8, 2: 0.8 + (v - 0.8) / 2, 4: x} for i, x in zip(ids, values_with_mean(v, 12))}
            write_ds(root / "downstream", rm, per, setting="bon", condition="profile")
            write_ds(root / "downstream", rm, dict(zip(ids, values_with_mean(v * 0.9, 12))), setting="rgd",
                     condition="oracle", extra={"policy": "builtin:smollm2-135m-instruct", "w": 1.0,
                                                "metric": "grade"})
        write_ds(root / "downstream", rm, dict(zip(ids, values_with_mean(v, 12))), setting="rl",
                 condition="profile", extra={"policy": "Qwen/Qwen2.5-0.5B-Instruct"})
    for rm, right in zip(["hf:org/good-rm", EVIL, "baseline:length", "baseline:random"], [9, 8, 6, 5]):
        write_pa_run(root, rm, dict(zip(ids, credits_with_mean(right, 12))), dict(zip(ids, credits_with_mean(8, 12))))
    write_pa_run(root, None, dict(zip(ids, [0.5] * 12)), {}, w=0.0)
    build_build_report(root)
    return root


@pytest.fixture(scope="module")
def meta(runs: Path) -> MetaResult:
    """The meta-evaluation the report shows, computed once (the report's own path is tested in test_cli_report)."""
    from prbench.meta import meta_evaluate

    return meta_evaluate([runs], [runs], n_boot=50, n_perm=50, seed=0, bon_k="max")


@pytest.fixture(scope="module")
def page(runs: Path, meta: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Page]:
    out = tmp_path_factory.mktemp("html") / "report.html"
    published = {"hf:org/good-rm": {"none": {"Arts": 72.36, "all": 75.0}, "oracle": {"Lifestyle": 97.78}},
                 "hf:not/run": {"none": {"Society": 60.0}}}
    build_report(runs, out, title=f"Report {EVIL}", published=published, n_boot=100, meta=meta)
    text = out.read_text(encoding="utf-8")
    p = Page()
    p.feed(text)
    p.close()
    return text, p


def test_all_sections_present_in_order(page: tuple[str, Page]) -> None:
    text, p = page
    assert [sid for sid, _ in SECTIONS] == SECTION_IDS
    for sid in SECTION_IDS:
        assert sid in p.ids, sid
    positions = [text.index(f'id="{sid}"') for sid in SECTION_IDS]
    assert positions == sorted(positions)
    assert len(p.ids) == len(set(p.ids))


def test_images_are_inline_pngs_and_svgs_well_formed(page: tuple[str, Page]) -> None:
    text, p = page
    imgs = [a for t, a in p.tags if t == "img"]
    assert imgs, "expected plots"
    for a in imgs:
        src = a.get("src") or ""
        assert src.startswith("data:image/png;base64,"), src[:40]
        raw = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert raw.startswith(PNG_SIGNATURE) and raw.rstrip().endswith(b"IEND\xaeB`\x82")
        assert a.get("alt")
    start = 0
    while (i := text.find("<svg", start)) != -1:  # any inline SVG must parse as XML
        j = text.index("</svg>", i) + len("</svg>")
        ET.fromstring(text[i:j])
        start = j


VOID = {"meta", "img", "br", "hr", "input", "link", "col", "area", "base", "wbr", "source"}


def test_html_is_well_nested(page: tuple[str, Page]) -> None:
    class Nesting(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []
            self.errors: list[tuple[str, tuple[int, int]]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag not in VOID:
                self.stack.append(tag)

        def handle_endtag(self, tag: str) -> None:
            if self.stack and self.stack[-1] == tag:
                self.stack.pop()
            else:
                self.errors.append((tag, self.getpos()))

    n = Nesting()
    n.feed(page[0])
    assert n.errors == [] and n.stack == []
    assert page[0].startswith("<!DOCTYPE html>")


def test_no_external_resources(page: tuple[str, Page]) -> None:
    _, p = page
    for tag, attrs in p.tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            v = (attrs.get(name) or "").strip().lower()
            assert not v.startswith(("http://", "https://", "//")), (tag, name, v)
        if tag == "link":
            pytest.fail("a <link> tag would load an external resource")
        if tag == "a":
            assert (attrs.get("href") or "").startswith("#")
    assert not any(t == "script" for t, _ in p.tags)


def test_tables_contain_models_and_escape_data(page: tuple[str, Page]) -> None:
    text, p = page
    cells = " | ".join(p.cells)
    for rm in RMS:
        assert rm in cells, rm
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert EVIL not in text  # never raw, not even in the title
    assert not any(t == "script" for t, _ in p.tags)


def test_section_contents(page: tuple[str, Page]) -> None:
    text, p = page
    body = " ".join(p.text)
    # leaderboard: baselines marked, categories and conditions present
    assert text.count('class="badge baseline"') >= 2
    for c in ("none", "profile", "oracle", "wrong-profile", "Arts", "Lifestyle"):
        assert c in body
    # diagnostics: the judge's invalid verdict and position columns
    assert "acc chosen=A" in body and "parse failures" in body
    # build: validation table
    assert "rubric fit" in body and "chosen fit >= 4 and rejected fit <= 2" in body
    # bon: oracle and random references
    assert "oracle (ceiling)" in body and "random pick (floor)" in body
    # rl-rgd: all three kinds
    assert "RL fine-tuning" in body and "Reward-guided decoding" in body and "plain policy" in body
    # meta: the paper's columns and paper B's Kendall
    for col in ("NDCG", "weighted tau", "Spearman", "RBO", "Kendall"):
        assert col in body
    assert "policy accuracy" in body and "Kendall tau-b" in body
    # published: our numbers beside theirs, an unmatched model says so
    assert "72.36" in body and "not run" in body and ("yes" in body or "no" in body)
    # provenance: hashes and run paths relative to the runs folder
    assert "prompt_hashes.judge: abc123def456" in body
    assert "eval/" in body


def test_meta_numbers_match_meta_evaluate(meta: MetaResult, page: tuple[str, Page]) -> None:
    from prbench.meta import main_rows

    body = " ".join(page[1].cells)
    shown = [r for r in main_rows(meta) if r.metrics]
    assert {r.setting.setting for r in shown} == {"bon", "rl", "rgd", "policy_accuracy"}
    for r in shown:
        assert f'{r.metric("spearman").value:.3f}' in body
        assert f'{r.metric("ndcg").value:.3f}' in body
    assert body.count("scatter") == 0  # plots are images, not text
    assert sum(1 for t, a in page[1].tags if t == "img" and "benchmark vs downstream" in (a.get("alt") or "")) == 4


def test_empty_sections_keep_ids(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for rm, right in zip(["rm:a", "rm:b"], [8, 6]):
        write_eval_run(root, rm, credits_with_mean(right, 10))
    out = build_report(root, tmp_path / "r.html", n_boot=50, n_perm=50)
    p = Page()
    p.feed(out.read_text(encoding="utf-8"))
    for sid in SECTION_IDS:
        assert sid in p.ids
    body = " ".join(p.text)
    assert "No build report" in body and "No Best-of-N results" in body and "No meta-evaluation" in body
    assert "No published numbers" in body


def test_report_of_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    out = build_report(tmp_path / "runs", tmp_path / "r.html", n_boot=20, n_perm=20)
    p = Page()
    p.feed(out.read_text(encoding="utf-8"))
    assert all(sid in p.ids for sid in SECTION_IDS)
    assert "No eval runs found" in " ".join(p.text)


def test_cli_report(tmp_path: Path) -> None:
    """The CLI end to end on a small folder: the report computes its own meta-evaluation."""
    from typer.testing import CliRunner

    from prbench.cli import command_app

    root = tmp_path / "runs"
    ids = [f"item-{i:03d}" for i in range(10)]
    for rm, right, down in zip(["hf:a", "hf:b", "baseline:length"], [9, 7, 5], [1.5, 1.0, 1.2]):
        write_eval_run(root, rm, credits_with_mean(right, 10), ids=ids)
        write_ds(root / "ds", rm, dict(zip(ids, values_with_mean(down, 10))), setting="rl")
    app = command_app("report")
    pub = tmp_path / "published.json"
    pub.write_text(json.dumps({"hf:a": {"none": {"Society": 70.0}}}))
    out = tmp_path / "out.html"
    r = CliRunner().invoke(app, ["report", str(root), "-o", str(out), "--title", "CLI report", "--published", str(pub),
                                 "--n-boot", "50", "--n-perm", "50"])
    assert r.exit_code == 0, r.output
    html_text = out.read_text(encoding="utf-8")
    assert "<title>CLI report</title>" in html_text and "70.00" in html_text
    p = Page()
    p.feed(html_text)
    cells = " ".join(p.cells)
    assert "RL [any]" not in cells and "RL" in cells  # the meta row: 3 RMs, Spearman 0.5
    assert "0.500" in cells
    bad = CliRunner().invoke(app, ["report", str(root), "-o", str(out), "--meta", str(pub)])
    assert bad.exit_code != 0
