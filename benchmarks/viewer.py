"""The viewer at scale: 20 RMs x 5 conditions x 1,000 pairs (100,000 judgments) in headless Chromium.

Writes a synthetic data set (1,000 pairs of 100 people, 12 profile posts each) and 100 eval run folders
in the layout `prbench eval` writes (RunDir, `prbench.summarize`), builds the bundle with
`prbench.viewer.write_bundle`, and measures in headless Chromium (the OS package, driven by
`prbench.viewer.chromium`) the time from navigation to (a) the interactive leaderboard and (b) the
people grid, each from a fresh load of its deep link: the `prbench:<view>` performance mark the page
sets once the view is rendered and its handlers attached (`startTime`, ms after navigation start).

The alternative measured beside it, in the same run: the data as records (every judgment an object
`{id, user_id, category, credit, score_chosen, score_rejected}`, the shape of examples.jsonl) instead
of the columnar encoding (one credit character and two rounded scores per pair per run). For both
encodings a minimal page loads only the data script and builds the people grid (accuracy per person
x RM under `profile`): the bundle's size and the time to that grid.

    python benchmarks/viewer.py              # ~3 minutes on 2 shared cores; writes benchmarks/results_viewer.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from prbench import summarize
from prbench.store.runs import RunDir
from prbench.viewer import collect, write_bundle
from prbench.viewer.chromium import Browser, find_chromium
from prbench.viewer.data import to_js

CONDITIONS = ("none", "profile", "wrong-profile", "planner", "oracle")
CATS = ("Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture")
WORDS = ("film", "camera", "develop", "night", "shift", "budget", "garden", "recipe", "training", "plan",
         "novel", "chapter", "history", "vote", "city", "policy", "debate", "music", "guitar", "practice",
         "health", "sleep", "travel", "rent", "savings", "code", "language", "class")


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_data(path: Path, n_pairs: int, n_people: int, rng: random.Random) -> list[dict[str, Any]]:
    profiles = {f"u{u:03d}": [{"id": f"u{u:03d}-p{k}", "text": _text(rng, 25)} for k in range(12)]
                for u in range(n_people)}
    rows = []
    for i in range(n_pairs):
        u = f"u{i % n_people:03d}"
        rows.append({"id": f"q{i:04d}", "user_id": u, "category": CATS[(i % n_people) % 3], "question": _text(rng, 20),
                     "profile": profiles[u], "chosen": _text(rng, 60), "rejected": _text(rng, 60)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def write_runs(root: Path, data: Path, rows: list[dict[str, Any]], n_rms: int, rng: random.Random) -> None:
    """One eval run per RM and condition, records and summary as `prbench eval` writes them."""
    for r in range(n_rms):
        skill = 0.5 + 0.3 * r / n_rms
        for cond in CONDITIONS:
            p = skill + (0.05 if cond == "profile" else 0.0)
            records = []
            for row in rows:
                sc, sr = rng.gauss(p, 1.0), rng.gauss(1 - p, 1.0)
                records.append({"id": row["id"], "user_id": row["user_id"], "category": row["category"],
                                "condition": cond, "score_chosen": round(sc, 5), "score_rejected": round(sr, 5),
                                "margin": round(sc - sr, 5), "truncated": {"chosen": False, "rejected": False},
                                "credit": 1.0 if sc > sr else 0.0, "longer": "same"})
            spec = f"synthetic:rm{r:02d}"
            run = RunDir(root / f"rm{r:02d}" / cond, {"model": spec, "data": str(data), "condition": cond, "seed": 0,
                                                     "top_k": 10, "retriever": "bm25"}, overwrite=True)
            run.append(records)
            m = summarize(records, seed=0, n_boot=200)
            run.write_summary({"model": spec, "spec": spec, "data": str(data), "condition": cond, "kind": "pointwise",
                               "seed": 0, "accuracy": m["accuracy"], "n": m["n"], "n_total": len(records),
                               "metrics": m, "model_info": {"fingerprint": {"spec": spec}}, "versions": {}})
            run.close()


def columnar_to_records(view: dict[str, Any]) -> dict[str, Any]:
    """The alternative encoding: every judgment an object, as in examples.jsonl."""
    out = []
    for r in view["runs"]:
        ds = view["datasets"][r["data"]]
        recs = [{"id": pid, "user_id": ds["users"][ds["user"][i]], "category": ds["cats"][ds["cat"][i]],
                 "credit": {"1": 1.0, "h": 0.5, "0": 0.0}.get(r["credit"][i]), "score_chosen": r["sc"][i],
                 "score_rejected": r["sr"][i]} for i, pid in enumerate(ds["ids"])]
        out.append({"model": r["model"], "cond": r["cond"], "records": recs})
    return {"runs": out}


GRID_COLUMNAR = """const D = window.PRBENCH_VIEW, ds = Object.values(D.datasets)[0], V = {"1": 1, "h": 0.5, "0": 0};
const grid = new Map();
for (const r of D.runs) { if (r.cond !== "profile") continue;
  for (let i = 0; i < ds.ids.length; i++) { const c = r.credit[i]; if (c === "-") continue;
    const k = ds.user[i] + "|" + r.model; const e = grid.get(k) || [0, 0]; e[0] += V[c]; e[1]++; grid.set(k, e); } }"""
GRID_RECORDS = """const D = window.PRBENCH_VIEW, grid = new Map();
for (const r of D.runs) { if (r.cond !== "profile") continue;
  for (const rec of r.records) { if (rec.credit === null) continue;
    const k = rec.user_id + "|" + r.model; const e = grid.get(k) || [0, 0]; e[0] += rec.credit; e[1]++; grid.set(k, e); } }"""


def minimal_page(folder: Path, data: dict[str, Any], grid_js: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.js").write_text(to_js(data), encoding="utf-8")
    (folder / "grid.js").write_text(grid_js + '\nperformance.mark("grid"); document.body.dataset.done = grid.size;\n',
                                    encoding="utf-8")
    (folder / "index.html").write_text('<!doctype html><body><script src="data.js"></script>'
                                       '<script src="grid.js"></script></body>', encoding="utf-8")
    return folder / "index.html"


def timed(b: Browser, url: str, mark: str) -> float:
    b.goto("about:blank")
    b.goto(url)
    b.wait_for(f"performance.getEntriesByName({json.dumps(mark)}).length > 0", timeout=60)
    return float(b.eval(f"performance.getEntriesByName({json.dumps(mark)})[0].startTime"))


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rms", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--people", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results_viewer.json")
    args = ap.parse_args()
    if find_chromium() is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        rows = write_data(t / "synthetic.jsonl", args.pairs, args.people, rng)
        write_runs(t / "runs", t / "synthetic.jsonl", rows, args.rms, rng)
        t0 = time.perf_counter()
        view = collect([t / "runs"])
        collect_s = time.perf_counter() - t0
        n_judgments = sum(len(r["credit"]) for r in view["runs"])
        bundle = write_bundle([t / "runs"], t / "bundle", data=view)
        alt = minimal_page(t / "records", columnar_to_records(view), GRID_RECORDS)
        col = minimal_page(t / "columnar", view, GRID_COLUMNAR)
        times: dict[str, list[float]] = {"leaderboard": [], "people": [], "grid_columnar": [], "grid_records": []}
        with Browser(1400, 900) as b:
            for _ in range(args.repeats):  # alternating, so a busy moment of the shared machine hits all alike
                times["leaderboard"].append(timed(b, (bundle / "index.html").as_uri() + "#/board", "prbench:board"))
                times["people"].append(timed(b, (bundle / "index.html").as_uri() + "#/people?cond=profile",
                                             "prbench:people"))
                times["grid_columnar"].append(timed(b, col.as_uri(), "grid"))
                times["grid_records"].append(timed(b, alt.as_uri(), "grid"))
            b.goto((bundle / "index.html").as_uri() + "#/people?cond=profile")
            b.wait_for("document.body.dataset.view === 'people'")
            people_rows = b.eval("document.querySelectorAll('tbody tr').length")
            b.goto((bundle / "index.html").as_uri() + "#/board")  # a new fragment only: no load event, wait for it
            b.wait_for("document.body.dataset.view === 'board'")
            board_rows = b.eval("document.querySelectorAll('tbody tr').length")
        res = {
            "rms": args.rms, "conditions": len(CONDITIONS), "pairs": args.pairs, "people": args.people,
            "judgments": n_judgments, "board_rows": board_rows, "people_rows": people_rows,
            "collect_s": round(collect_s, 2), "comparisons_precomputed": len(view["compare"]),
            "bundle_bytes": folder_size(bundle), "data_js_bytes": (bundle / "data.js").stat().st_size,
            "assets_bytes": sum((bundle / f).stat().st_size for f in ("index.html", "app.js", "style.css")),
            "columnar_page_bytes": folder_size(col.parent), "records_page_bytes": folder_size(alt.parent),
            "ms": {k: [round(v, 1) for v in vs] for k, vs in times.items()},
            "median_ms": {k: round(statistics.median(vs), 1) for k, vs in times.items()},
            "loadavg_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "python": platform.python_version(),
            "chromium": find_chromium(),
        }
    args.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
