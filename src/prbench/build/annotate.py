"""Human validation round trip: export a blind sample for people to score, then measure agreement.

`export_annotation` samples kept pairs (seeded), shows each pair's two answers as A and B in a
seeded random order, and writes three files next to each other:
    <prefix>.csv       one row per answer, score columns empty (the annotator's sheet)
    <prefix>.html      a self-contained form (inline JS, no network) that fills the same columns
                       and downloads <batch>.filled.csv
    <prefix>.key.json  what the annotator must not see: item id, which letter is chosen, and the
                       validator's scores
`agreement` joins a filled CSV with its key and reports, per scale, Spearman's rho between human
and validator scores and Cohen's kappa on binned scores (low 1-2, mid 3, high 4-5), plus the
human version of the validation table.
"""

from __future__ import annotations

import csv
import html
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prbench.build.generate import format_aspects
from prbench.build.report import scale_table, scales_markdown
from prbench.build.validate import SCALES
from prbench.data import load_examples
from prbench.errors import PrbenchError
from prbench.evaluation.scoring import example_seed

COLUMNS = ("batch", "pair", "response", "category", "question", "expects", "answer", *SCALES, "comment")
BINS = ("low", "mid", "high")


def score_bin(score: float) -> str:
    """low (1-2), mid (3), high (4-5): coarse agreement that forgives a one-point slip inside a band."""
    return "low" if score < 2.5 else ("mid" if score < 3.5 else "high")


def _kept_pairs(run_dir: Path) -> tuple[list[Any], dict[str, dict]]:
    data = run_dir / "data"
    recs_path = run_dir / "build" / "examples.jsonl"
    if not data.is_dir() or not recs_path.is_file():
        raise PrbenchError(f"{run_dir} is not a finished build folder (needs data/ and build/examples.jsonl)")
    examples = load_examples(data)
    records: dict[str, dict] = {}
    with recs_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                records[r["id"]] = r
    return examples, records


def export_annotation(run_dir: str | Path, prefix: str | Path, n: int = 30, seed: int = 0) -> dict[str, Any]:
    """Write <prefix>.csv, .html and .key.json for a blind sample of up to `n` kept pairs."""
    run_dir, prefix = Path(run_dir), Path(prefix)
    examples, records = _kept_pairs(run_dir)
    if not examples:
        raise PrbenchError(f"{run_dir} has no kept pairs to annotate")
    pool = sorted(examples, key=lambda ex: ex.id)
    sample = random.Random(f"{seed}:annotate-sample").sample(pool, min(n, len(pool)))
    batch = prefix.name
    rows: list[dict[str, str]] = []
    key: dict[str, Any] = {"batch": batch, "run": str(run_dir), "seed": seed, "bins": "low 1-2, mid 3, high 4-5",
                           "pairs": {}}
    for k, ex in enumerate(sample, 1):
        pair = f"P{k:03d}"
        chosen_a = random.Random(example_seed(seed, ex.id, "annotate-order")).random() < 0.5
        roles = {"A": "chosen", "B": "rejected"} if chosen_a else {"A": "rejected", "B": "chosen"}
        val = (records.get(ex.id) or {}).get("validation") or {}
        scores = {role: (val.get(role) or {}).get("scores") for role in ("chosen", "rejected")}
        key["pairs"][pair] = {"id": ex.id, "category": ex.category, **roles, "validator": scores}
        for letter in ("A", "B"):
            text = ex.chosen if roles[letter] == "chosen" else ex.rejected
            rows.append({"batch": batch, "pair": pair, "response": letter, "category": ex.category,
                         "question": ex.question, "expects": format_aspects(ex.rubric_aspects), "answer": text,
                         **{s: "" for s in SCALES}, "comment": ""})
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = {"csv": prefix.with_name(f"{batch}.csv"), "html": prefix.with_name(f"{batch}.html"),
             "key": prefix.with_name(f"{batch}.key.json")}
    with paths["csv"].open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    paths["html"].write_text(annotation_html(batch, rows), encoding="utf-8")
    paths["key"].write_text(json.dumps(key, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"pairs": len(sample), "responses": len(rows), **{k: str(v) for k, v in paths.items()}}


def annotation_html(batch: str, rows: Sequence[Mapping[str, str]]) -> str:
    """A single-file form: no network, scores kept in localStorage, filled CSV downloaded in-browser."""
    data = json.dumps({"batch": batch, "columns": list(COLUMNS), "scales": list(SCALES), "rows": list(rows)},
                      ensure_ascii=False).replace("</", "<\\/")
    return _HTML.replace("__TITLE__", html.escape(batch)).replace("__DATA__", data)


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Annotation: __TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;line-height:1.4}
.pair{border:1px solid #bbb;border-radius:6px;padding:.8rem;margin:1rem 0}
.resp{border-left:4px solid #79a;padding:.3rem .8rem;margin:.6rem 0;background:#f6f8fa}
.expects{white-space:pre-wrap;background:#fffbe6;padding:.4rem}
.answer{white-space:pre-wrap}
.scales label{margin-right:1rem;display:inline-block}
#bar{position:sticky;top:0;background:#fff;padding:.5rem 0;border-bottom:1px solid #ddd}
textarea{width:100%}
</style></head><body>
<div id="bar"><b>Batch __TITLE__</b> &middot; <span id="progress"></span>
<button id="download">Download filled CSV</button></div>
<p>Score every answer from 1 (very poor) to 5 (excellent) on each scale. Judge factuality,
relevance (does it answer the question and follow the request) and helpfulness (useful and
harmless) on their own merits; judge <i>rubric fit</i> against what this person expects.
Your scores are kept in this browser until you download the CSV.</p>
<div id="pairs"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  var D = JSON.parse(document.getElementById("data").textContent);
  var store = "prbench-annotation-" + D.batch;
  var saved = {};
  try { saved = JSON.parse(localStorage.getItem(store) || "{}"); } catch (e) { saved = {}; }
  D.rows.forEach(function (r) {
    var k = r.pair + r.response;
    if (saved[k]) { D.columns.forEach(function (c) { if (c in saved[k]) r[c] = saved[k][c]; }); }
  });
  function save() {
    var s = {};
    D.rows.forEach(function (r) {
      var v = {}; D.scales.forEach(function (c) { v[c] = r[c]; }); v.comment = r.comment;
      s[r.pair + r.response] = v;
    });
    try { localStorage.setItem(store, JSON.stringify(s)); } catch (e) {}
    progress();
  }
  function progress() {
    var done = D.rows.filter(function (r) { return D.scales.every(function (c) { return r[c] !== ""; }); }).length;
    document.getElementById("progress").textContent = done + " of " + D.rows.length + " answers fully scored";
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e;
  }
  var root = document.getElementById("pairs"), byPair = {};
  D.rows.forEach(function (r) { (byPair[r.pair] = byPair[r.pair] || []).push(r); });
  Object.keys(byPair).forEach(function (p) {
    var rows = byPair[p], box = el("div", "pair");
    box.appendChild(el("h3", "", "Pair " + p + " (" + rows[0].category + ")"));
    box.appendChild(el("p", "", "Question: " + rows[0].question));
    box.appendChild(el("div", "", "What this person expects:"));
    box.appendChild(el("div", "expects", rows[0].expects));
    rows.forEach(function (r) {
      var d = el("div", "resp");
      d.appendChild(el("h4", "", "Answer " + r.response));
      d.appendChild(el("div", "answer", r.answer));
      var sc = el("div", "scales");
      D.scales.forEach(function (c) {
        var lab = el("label", "", c.replace("_", " ") + " "), sel = document.createElement("select");
        ["", "1", "2", "3", "4", "5"].forEach(function (v) {
          var o = document.createElement("option"); o.value = v; o.textContent = v === "" ? "-" : v; sel.appendChild(o);
        });
        sel.value = String(r[c]);
        sel.addEventListener("change", function () { r[c] = sel.value; save(); });
        lab.appendChild(sel); sc.appendChild(lab);
      });
      d.appendChild(sc);
      var t = document.createElement("textarea"); t.rows = 1; t.placeholder = "comment (optional)"; t.value = r.comment;
      t.addEventListener("input", function () { r.comment = t.value; save(); });
      d.appendChild(t); box.appendChild(d);
    });
    root.appendChild(box);
  });
  function cell(v) {
    v = String(v === undefined || v === null ? "" : v);
    return /[",\\r\\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v;
  }
  document.getElementById("download").addEventListener("click", function () {
    var lines = [D.columns.join(",")];
    D.rows.forEach(function (r) { lines.push(D.columns.map(function (c) { return cell(r[c]); }).join(",")); });
    var blob = new Blob([lines.join("\\r\\n") + "\\r\\n"], {type: "text/csv;charset=utf-8"});
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob); a.download = D.batch + ".filled.csv";
    document.body.appendChild(a); a.click(); setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  });
  progress();
})();
</script></body></html>
"""


def _find_key(filled: Path, batch: str, key: str | Path | None) -> Path:
    if key:
        return Path(key)
    candidates = [filled.with_name(f"{batch}.key.json"),
                  filled.with_name(filled.name.removesuffix(".csv").removesuffix(".filled") + ".key.json"),
                  Path.cwd() / f"{batch}.key.json"]
    for c in candidates:
        if c.is_file():
            return c
    raise PrbenchError(f"no key file for batch {batch!r} next to {filled} "
                       f"(expected {candidates[0].name}); pass --key")


def _human_score(value: str, where: str) -> float | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        v = float(value)
    except ValueError:
        raise PrbenchError(f"{where}: score {value!r} is not a number from 1 to 5") from None
    if not 1 <= v <= 5:
        raise PrbenchError(f"{where}: score {value!r} is outside 1-5")
    return v


def cohen_kappa(a: Sequence[str], b: Sequence[str], labels: Sequence[str] = BINS) -> float | None:
    """Unweighted Cohen's kappa; None when chance agreement is total (both raters constant and equal)."""
    if not a:
        return None
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pe = sum((a.count(lab) / n) * (b.count(lab) / n) for lab in labels)
    if pe >= 1.0:
        return None
    return (po - pe) / (1 - pe)


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def agreement(filled: str | Path, key: str | Path | None = None) -> dict[str, Any]:
    """Human-vs-validator agreement for a filled annotation CSV, plus the human validation table."""
    filled = Path(filled)
    with filled.open(encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise PrbenchError(f"{filled}: no rows")
    missing_cols = [c for c in ("batch", "pair", "response", *SCALES) if c not in rows[0]]
    if missing_cols:
        raise PrbenchError(f"{filled}: missing columns {', '.join(missing_cols)}")
    batch = rows[0]["batch"]
    key_path = _find_key(filled, batch, key)
    k = json.loads(key_path.read_text(encoding="utf-8"))
    if k.get("batch") != batch:
        raise PrbenchError(f"{key_path} belongs to batch {k.get('batch')!r}, the CSV to {batch!r}")
    human: dict[str, dict[str, dict[str, float | None]]] = {}
    per_scale: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in SCALES}
    unscored = 0
    for i, r in enumerate(rows, 2):
        pair, letter = r["pair"], r["response"]
        if pair not in k["pairs"] or letter not in ("A", "B"):
            raise PrbenchError(f"{filled}:{i}: pair {pair!r} / response {letter!r} is not in the key")
        role = k["pairs"][pair][letter]
        scores = {s: _human_score(r[s], f"{filled}:{i}:{s}") for s in SCALES}
        pairs_h = human.setdefault(pair, {})
        pairs_h[role] = scores
        if all(v is None for v in scores.values()):
            unscored += 1
        vscores = (k["pairs"][pair].get("validator") or {}).get(role) or {}
        for s in SCALES:
            mine = scores[s]
            if mine is not None and vscores.get(s) is not None:
                per_scale[s][0].append(mine)
                per_scale[s][1].append(float(vscores[s]))
    scales = {}
    for s, (h, v) in per_scale.items():
        scales[s] = {
            "n": len(h),
            "spearman": _spearman(h, v),
            "kappa_binned": cohen_kappa([score_bin(x) for x in h], [score_bin(x) for x in v]),
            "exact_agreement": round(float(np.mean([a == b for a, b in zip(h, v)])), 4) if h else None,
            "mean_abs_diff": round(float(np.mean(np.abs(np.subtract(h, v)))), 4) if h else None,
        }
    by_cat: dict[str, list[tuple[dict, dict]]] = {}
    prefers: dict[str, list[float]] = {}
    for pair, roles in human.items():
        if "chosen" not in roles or "rejected" not in roles:
            continue
        cat = k["pairs"][pair]["category"]
        by_cat.setdefault(cat, []).append((roles["chosen"], roles["rejected"]))
        c_fit, r_fit = roles["chosen"]["rubric_fit"], roles["rejected"]["rubric_fit"]
        if c_fit is not None and r_fit is not None:
            prefers.setdefault(cat, []).append(1.0 if c_fit > r_fit else (0.5 if c_fit == r_fit else 0.0))
    every = [p for ps in by_cat.values() for p in ps]
    table = {cat: scale_table(ps) for cat, ps in sorted(by_cat.items())}
    table["all"] = scale_table(every)
    pref_all = [x for xs in prefers.values() for x in xs]
    pref: dict[str, float | None] = {cat: round(float(np.mean(xs)), 4) for cat, xs in sorted(prefers.items())}
    pref["all"] = round(float(np.mean(pref_all)), 4) if pref_all else None
    return {"batch": batch, "key": str(key_path), "pairs": len(human), "responses": len(rows),
            "responses_unscored": unscored, "bins": "low 1-2, mid 3, high 4-5", "scales": scales,
            "human_table": table, "human_prefers_chosen_on_rubric_fit": pref}


def agreement_markdown(result: Mapping[str, Any]) -> str:
    """Agreement per scale, then the human validation table in the paper's layout."""
    lines = [(f"Human vs validator, batch {result['batch']}: {result['pairs']} pairs, "
              f"{result['responses']} answers ({result['responses_unscored']} unscored)."), "",
             "| scale | n | Spearman rho | Cohen's kappa (low/mid/high) | exact agreement | mean abs diff |",
             "|---|---|---|---|---|---|"]

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for s, m in result["scales"].items():
        lines.append(f"| {s} | {m['n']} | {f(m['spearman'])} | {f(m['kappa_binned'])} | "
                     f"{f(m['exact_agreement'])} | {f(m['mean_abs_diff'])} |")
    pref = result["human_prefers_chosen_on_rubric_fit"]
    extra = [("human rubric fit: chosen > rejected (ties 0.5)", [f(pref.get(c)) for c in result["human_table"]])]
    lines += ["", "Human scores, 1-5, mean (min-max):", "", scales_markdown(result["human_table"], extra)]
    return "\n".join(lines) + "\n"
