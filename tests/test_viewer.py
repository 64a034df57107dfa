"""Issue 48: `prbench view`, driven in a real headless Chromium (the OS package) over the DevTools pipe.

Real runs: the baselines and a pairwise API judge (prbench.testing's OpenAI-compatible server on 127.0.0.1)
on a copy of the built-in sample whose first person's profile holds stances and a past choice, plus one
damaged run folder and Best-of-N results. The bundle is opened from file://; every check reads the page
the browser laid out (element boxes, what was requested, what a click led to)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from unittest import mock
from urllib.parse import quote

import pytest

from prbench.viewer.chromium import Browser, find_chromium

PERSON = "arts-u01"  # the person given stances and a past choice
NEEDS = "chromium is not installed (apt-get install chromium): the viewer's checks need a real browser"


def run_cli(*args: str) -> None:
    from prbench.cli import main

    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), args


def _data_with_stances(path: Path) -> Path:
    """The built-in sample with PERSON's first profile items turned into judgments: agree, disagree, a past choice."""
    from prbench.raw import sample_path

    rows = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        if row["user_id"] == PERSON:
            prof = row["profile"]
            prof[0] = {"id": prof[0]["id"], "text": prof[0]["text"], "stance": "agree"}
            prof[1] = {"id": prof[1]["id"], "text": prof[1]["text"], "stance": "disagree"}
            prof[2] = {"id": prof[2]["id"], "prompt": "Which developer for a first roll?",
                       "chosen": prof[2]["text"], "rejected": "Whatever the shop has, just guess the times."}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from prbench.testing.openai_server import serve
    from tests.test_meta import write_ds

    root = tmp_path_factory.mktemp("viewer")
    data = _data_with_stances(root / "stances.jsonl")
    runs = root / "runs"
    env = {"PRBENCH_CACHE_DIR": str(root / "cache"), "MY_KEY": "loopback-key"}
    with mock.patch.dict("os.environ", env), serve(lambda body: "Result: A") as server:
        run_cli("eval", "-m", "baseline:lexical", "-m", "baseline:length", "-d", str(data), "-c",
                "none,profile,wrong-profile", "--out", str(runs), "-q")
        run_cli("eval", "-m", "judge:openai:stand-in", "--base-url", server.base_url, "--api-key-env", "MY_KEY",
                "--both-orders", "-d", str(data), "-c", "profile", "--limit", "8", "--out", str(runs), "-q")
    trained = root / "trained-rm"  # a trained RM's folder names its training people (here: PERSON alone)
    trained.mkdir()
    (trained / "config.json").write_text(json.dumps({"users": [PERSON], "encoder": "x"}), encoding="utf-8")
    [lexical] = [p.parent for p in runs.rglob("summary.json") if "lexical" in str(p) and p.parent.name == "profile"]
    copy = runs / "trained" / "profile"
    copy.mkdir(parents=True)
    for f in lexical.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    summary.update(spec=f"pal:{trained}", model="trained-rm")
    (copy / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    good = sorted(p.parent for p in runs.rglob("summary.json"))
    damaged = runs / "damaged" / "profile"
    damaged.mkdir(parents=True)
    for f in good[0].iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / "summary.json").write_text('{"run": "eval", "model": ', encoding="utf-8")  # cut mid-write
    for i, rm in enumerate(("baseline:lexical", "baseline:length", "judge:openai:stand-in")):
        write_ds(runs / "bon", rm, {f"q{j}": {1: 0.2 + 0.1 * i, 2: 0.3 + 0.1 * i, 4: 0.35 + 0.1 * i}
                                    for j in range(6)}, setting="bon", condition="profile")
    bundle = root / "bundle"
    run_cli("view", str(runs), "--bundle", str(bundle))
    view = json.loads((bundle / "data.js").read_text(encoding="utf-8").split("=", 1)[1].rstrip(";\n"))
    return {"root": root, "runs": runs, "good": good, "damaged": damaged, "bundle": bundle, "data": view,
            "url": (bundle / "index.html").as_uri(), "dataset": str(data)}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if find_chromium() is None:
        pytest.skip(NEEDS)
    with Browser(1400, 900) as b:
        yield b


def _show(b: Browser, url: str, view: str) -> None:
    b.goto(url)
    b.wait_for(f"document.body.dataset.view === {json.dumps(view)}")


def _run_index(site: dict, model: str, cond: str) -> int:
    [i] = [r["i"] for r in site["data"]["runs"] if r["model"] == model and r["cond"] == cond]
    return i


def test_leaderboard_shows_every_run_and_the_damaged_one_as_one_skipped_line(site: dict, browser: Browser) -> None:
    _show(browser, site["url"], "board")
    shown = browser.eval("[...document.querySelectorAll('tbody tr[data-run]')].map(tr => tr.dataset.run)")
    assert sorted(shown) == sorted(str(p) for p in site["good"])  # 6 baseline runs, the trained RM's, the judge's
    skipped = browser.eval("[...document.querySelectorAll('#skipped .skipped p')].map(p => p.textContent)")
    assert len(skipped) == 1 and skipped[0].startswith("skipped: ") and str(site["damaged"]) in skipped[0]
    judge = browser.eval("[...document.querySelectorAll('tbody tr')].find(tr => tr.textContent.includes("
                         "'stand-in')).textContent")
    assert re.search(r"\b[1-9]\d*\+[1-9]\d* tok", judge)  # the API judge's input + output tokens
    column = "[...document.querySelectorAll('tbody tr')].map(tr => parseFloat(tr.children[2].textContent))"
    accs = browser.eval(column)
    assert accs == sorted(accs, reverse=True) and len(accs) == 8  # best first
    browser.click("th button[data-key=acc]")  # sortable: a click turns the order round
    browser.wait_for("location.hash.includes('sort=acc&dir=asc')")
    browser.wait_for(f"{column}[0] === {min(accs)!r}")  # the table redraws after the hash changes (a loaded CPU lags)
    assert browser.eval(column) == sorted(accs)


def test_a_click_on_a_person_opens_their_pairs_and_a_pair_shows_the_profile_with_stances(
        site: dict, browser: Browser) -> None:
    data = site["data"]["datasets"][site["dataset"]]
    _show(browser, f"{site['url']}#/people?data={site['dataset']}&cond=profile", "people")
    browser.click(f"a.person[href*='{PERSON}']")
    browser.wait_for("document.body.dataset.view === 'person'")
    mine = [pid for pid, u in zip(data["ids"], data["user"]) if data["users"][u] == PERSON]
    assert browser.eval("[...document.querySelectorAll('a.pair')].map(a => a.textContent)") == mine
    browser.click("a.pair")
    browser.wait_for("document.body.dataset.view === 'pair'")
    assert browser.eval("location.hash") == f"#/pair/{quote(site['dataset'], safe='')}/{mine[0]}"
    profile = browser.eval("""(() => { const p = document.querySelector('.profile');
        return {for: [...p.querySelectorAll('.verdict.for')].map(v => v.parentNode.textContent),
                against: [...p.querySelectorAll('.verdict.against')].map(v => v.parentNode.textContent),
                chose: [...p.querySelectorAll('.verdict.chose')].map(v => v.parentNode.textContent),
                owner: p.querySelector('h3').textContent}; })()""")
    assert PERSON in profile["owner"]
    assert len(profile["for"]) == 1 and "agree" in profile["for"][0] and "disagree" not in profile["for"][0]
    assert len(profile["against"]) == 1 and "disagree" in profile["against"][0]
    assert len(profile["chose"]) == 1 and "over" in profile["chose"][0] and "Which developer" in profile["chose"][0]
    body = browser.eval("document.querySelector('main').innerText")
    for needle in ("Chosen (the user's choice)", "Rejected", "The wrong-profile control", "verdicts A/A"):
        assert needle in body


def test_compare_view_gives_prbench_compare_numbers(site: dict, browser: Browser, capsys: pytest.CaptureFixture
                                                    ) -> None:
    a, b = _run_index(site, "baseline:lexical", "profile"), _run_index(site, "baseline:length", "profile")
    runs = {r["i"]: r["path"] for r in site["data"]["runs"]}
    for x, y in ((a, b), (b, a)):
        capsys.readouterr()
        run_cli("compare", runs[x], runs[y], "--json")
        want = json.loads(capsys.readouterr().out)
        _show(browser, f"{site['url']}#/compare?a={x}&b={y}", "compare")
        got = browser.eval("""(() => { const d = document.querySelectorAll('#compare-result dd');
            return {diff: +d[0].dataset.value, lo: +d[1].dataset.lo, hi: +d[1].dataset.hi, p: +d[2].dataset.value,
                    text: d[0].textContent, n: d[3].textContent}; })()""")
        assert got["diff"] == pytest.approx(want["diff"], abs=1e-12) and got["p"] == want["mcnemar_p"]
        assert (got["lo"], got["hi"]) == pytest.approx((want["ci_low"], want["ci_high"]), abs=1e-12)
        assert got["text"] == f"{100 * want['diff']:+.1f}" and got["n"] == str(want["n_shared"])
    ca, cb = (next(r["credit"] for r in site["data"]["runs"] if r["i"] == k) for k in (b, a))
    differ = [pid for pid, x, y in zip(site["data"]["datasets"][site["dataset"]]["ids"], ca, cb)
              if "-" not in (x, y) and x != y]
    assert browser.eval("[...document.querySelectorAll('ul.disagree a.pair')].map(a => a.textContent)") == differ
    browser.click("ul.disagree a.pair")
    browser.wait_for("document.body.dataset.view === 'pair'")


def test_a_reloaded_deep_link_shows_the_same_view(site: dict, browser: Browser) -> None:
    ds = quote(site["dataset"], safe="")
    for frag, view in ((f"#/people?data={ds}&cond=profile&sort=gap&dir=desc", "people"),
                       (f"#/person/{ds}/{PERSON}?cond=wrong-profile", "person"),
                       (f"#/pair/{ds}/arts-002", "pair"), ("#/compare?a=1&b=4", "compare"),
                       ("#/board?sort=n&dir=asc", "board"), ("#/downstream", "downstream")):
        _show(browser, site["url"] + frag, view)
        before = browser.eval("document.querySelector('main').innerText")
        browser.reload()
        browser.wait_for(f"document.body.dataset.view === '{view}'")
        assert browser.eval("document.querySelector('main').innerText") == before, frag
        assert not re.search(r"^No (person|pair)", before, re.MULTILINE) and len(before) > 200, before
    _show(browser, f"{site['url']}#/people?data={ds}&cond=profile&sort=gap&dir=desc", "people")
    gaps = browser.eval("[...document.querySelectorAll('tbody tr')].map(tr => tr.lastChild.textContent)")
    values = [float(g) for g in gaps if g != "–"]
    assert values == sorted(values, reverse=True) and len(values) > 10


def test_seen_and_unseen_people_follow_the_trained_rm_folder(site: dict, browser: Browser) -> None:
    ds = site["dataset"]
    people = "[...document.querySelectorAll('a.person')].map(a => a.textContent)"
    _show(browser, f"{site['url']}#/people?data={ds}&cond=profile&seen=seen", "people")
    assert browser.eval(people) == [PERSON]
    _show(browser, f"{site['url']}#/people?data={ds}&cond=profile&seen=unseen", "people")
    unseen = browser.eval(people)
    assert PERSON not in unseen and len(unseen) == len(site["data"]["datasets"][ds]["users"]) - 1


def test_downstream_view_draws_best_of_n_curves_and_meta_agreement(site: dict, browser: Browser) -> None:
    from prbench.meta import PAPER_COLUMNS, main_rows, meta_evaluate

    _show(browser, site["url"] + "#/downstream", "downstream")
    assert browser.eval("document.querySelectorAll('svg.chart path.line').length") == 3
    keys = browser.eval("[...document.querySelectorAll('figcaption .key')].map(k => k.textContent)")
    assert sorted(k.lstrip("■ ") for k in keys) == ["baseline:length", "baseline:lexical", "judge:openai:stand-in"]
    want = main_rows(meta_evaluate([site["runs"]], [site["runs"]]))  # what `prbench meta` computes, its defaults
    rows = browser.eval("[...[...document.querySelectorAll('main table')].pop().querySelectorAll('tbody tr')]"
                        ".map(tr => [...tr.children].map(td => td.textContent))")
    assert len(rows) == len(want)
    k, first = next((k, r) for k, r in enumerate(want) if r.metrics)  # rows of too few shared RMs carry a note
    cells = rows[k]
    assert cells[:2] == [first.benchmark.label, first.setting.label]
    ndcg = first.metric(PAPER_COLUMNS[0][0])
    assert cells[3] == f"{ndcg.value:.3f} [{ndcg.ci_low:.3f}, {ndcg.ci_high:.3f}]"


def test_no_request_leaves_the_folder(site: dict) -> None:
    if find_chromium() is None:
        pytest.skip(NEEDS)
    folder = site["bundle"].as_uri() + "/"
    ds = quote(site["dataset"], safe="")
    with Browser(1400, 900) as b:  # a fresh browser: every request it makes is on record
        for frag, view in (("", "board"), (f"#/people?data={ds}", "people"), (f"#/pair/{ds}/arts-001", "pair"),
                           ("#/compare", "compare"), ("#/downstream", "downstream")):
            _show(b, site["url"] + frag, view)
        b.click("nav a[data-view=people]")
        b.wait_for("document.body.dataset.view === 'people'")
        b.click("a.person")
        b.wait_for("document.body.dataset.view === 'person'")
        urls = b.requested()
    assert urls and all(u.startswith(folder) for u in urls), [u for u in urls if not u.startswith(folder)]
    assert {u.removeprefix(folder) for u in urls} == {"index.html", "style.css", "data.js", "app.js"}


OVERLAPS = """(() => {
  const boxes = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.textContent.trim() || !n.parentElement.checkVisibility()) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    for (const b of r.getClientRects()) if (b.width > 0.5 && b.height > 0.5) boxes.push([b.left, b.top, b.right, b.bottom, n.textContent.trim().slice(0, 30)]);
  }
  const bad = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    const w = Math.min(a[2], b[2]) - Math.max(a[0], b[0]), h = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
    if (w > 1 && h > 1) bad.push(a[4] + ' / ' + b[4]);
  }
  const wide = document.documentElement.scrollWidth > window.innerWidth + 1 ? ['page wider than the window'] : [];
  return {n: boxes.length, bad: bad.slice(0, 10).concat(wide)};
})()"""


@pytest.mark.parametrize("width", [1400, 390])
def test_no_overlapping_text(site: dict, browser: Browser, width: int) -> None:
    ds = quote(site["dataset"], safe="")
    a, b = _run_index(site, "baseline:lexical", "profile"), _run_index(site, "baseline:length", "profile")
    browser.resize(width)
    try:
        for frag, view in (("#/board", "board"), (f"#/people?data={ds}", "people"),
                           (f"#/person/{ds}/{PERSON}", "person"), (f"#/pair/{ds}/arts-001", "pair"),
                           (f"#/compare?a={a}&b={b}", "compare"), ("#/downstream", "downstream")):
            _show(browser, site["url"] + frag, view)
            browser.eval("document.querySelectorAll('details').forEach(d => d.open = true)")
            found = browser.eval(OVERLAPS)
            assert found["n"] > 20 and found["bad"] == [], (width, view, found["bad"])
    finally:
        browser.resize(1400)


def test_live_mode_serves_the_same_viewer_on_127_0_0_1(site: dict) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "prbench", "view", str(site["runs"]), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        page = urllib.request.urlopen(url.group(0), timeout=30).read().decode()
        assert '<script src="data.js">' in page
        served = urllib.request.urlopen(url.group(0) + "data.js", timeout=30).read().decode()
        assert json.loads(served.split("=", 1)[1].rstrip(";\n"))["runs"] == site["data"]["runs"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bundle_refuses_a_folder_it_did_not_write(site: dict, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "prbench", "view", str(site["runs"]), "--bundle", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode != 0 and out.stderr.count("\n") == 1 and "not an empty folder" in out.stderr
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_trained_rm_folders_name_their_people(tmp_path: Path) -> None:
    from prbench.viewer.data import trained_users

    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "config.json").write_text(json.dumps({"users": ["u1", "u2"], "encoder": "x"}))
    (tmp_path / "pal").mkdir()
    (tmp_path / "pal" / "config.json").write_text(json.dumps({"users": ["u1", "u3"], "adapted_users": ["u3"],
                                                               "train_users": ["u4"]}))
    assert trained_users(f"head:{tmp_path / 'heads'}") == ["u1", "u2"]
    assert trained_users(f"pal:{tmp_path / 'pal'}") == ["u1", "u4"]
    assert trained_users("baseline:lexical") is None
