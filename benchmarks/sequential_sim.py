"""Simulated studies under `--until decided`: coverage at every item, the full ranking reached, judge calls saved.

Each study draws credits for judges x conditions on 2,830 items from 283 users (`prbench.stats.seqsim.StudyShape`),
orders the items at random and runs the stopping rule as `prbench eval --until decided` does (`prbench.stats.seqsim`:
the same confidence sequences from `prbench.stats.confseq` at the same grid, the same level split, looks after 100
items then every 10% more, a run retired once every pair it is in is settled). The baseline is the full study
(every item, every run): its ranking is the truth the stopped study must reach. "naive" is the same rule on
fixed-n 95% normal intervals recomputed at every look, the peeking the confidence sequences replace.

    nice -n 10 python benchmarks/sequential_sim.py --studies 2000 --out benchmarks/results_sequential.json

Several processes with other --seed values (and --only NAME, --exact-runs) join with --merge A.json B.json
--out benchmarks/results_sequential.json; --ship writes the rows the study dry run reads into the package;
--markdown prints the table of RESULTS_sequential.md.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from prbench.stats.seqsim import EXPECTED_FILE, Policy, StudyShape, simulate, simulate_study

PAPER = StudyShape()
PRESET = StudyShape(family=30)
SHAPES = {  # name: (shape, policy, share of --studies)
    "paper": (PAPER, Policy(), 1.0),
    "preset": (PRESET, Policy(), 0.2),
    "preset, its judges' published accuracies (67.7 / 70.5 / 74.6)":
        (StudyShape(judges=(0.677, 0.705, 0.746), family=30), Policy(), 0.2),
    "paper, a condition's runs stop together (before)": (PAPER, Policy(retire=False), 0.04),
    "paper, a look after every item": (PAPER, Policy(growth=None), 0.04),
    "paper, 275 pairs share the 5% (the preset without scoring free models first)":
        (StudyShape(family=275), Policy(), 0.04),
    "published judge gaps (67.7 / 70.5 / 74.6)": (StudyShape(judges=(0.677, 0.705, 0.746)), Policy(), 0.04),
    "close judges (61 / 65 / 69)": (StudyShape(judges=(0.61, 0.65, 0.69)), Policy(), 0.04),
    "judges agree more (item share 0.5)": (StudyShape(item_share=0.5), Policy(), 0.04),
    "unstructured (every run uniform in 0.55-0.75)": (StudyShape(spread=(0.55, 0.75)), Policy(), 0.04),
}
"""`preset`: the default shape inside `prbench study --preset personalized-rewardbench`: its 8 models that send no API
request are scored on every item first, so 15 judge pairs and 15 judges' own sequences share the 5% (assumed: no
judge within the margin of a free model's accuracy, so those comparisons settle before the judges' own)."""


CHECKS = ("coverage", "orders")  # rows of results that are not simulated shapes
ORDERS_OWN = 0.35
"""`orders`: the share of the latent a judge's two orders of one item have in common beyond the item and user parts:
with 30% item and 5% user, 0.35 makes the two orders agree on about 79% of items (position consistency: an
assumption; Shi et al. 2024, arXiv 2406.07791, find it varies widely across judges and tasks)."""


def naive_peeking(shape: StudyShape, rng: np.random.Generator) -> tuple[float, bool]:
    """The same rule on fixed-n normal 95% intervals of each paired difference at the same looks, a condition's
    runs stopping together: (call fraction, full ranking reached)."""
    credits = shape.credits(rng)
    n = credits.shape[1]
    looks = Policy().looks(n)
    stops, ok = [], True
    for c in range(shape.conditions):
        pairs = [(i, j) for i, j in shape.pairs() if i // shape.models == c]
        d = {p: credits[p[0]] - credits[p[1]] for p in pairs}
        for t in looks:
            ivs = {}
            for p, x in d.items():
                half = 1.96 * x[:t].std(ddof=1) / np.sqrt(t)
                ivs[p] = (x[:t].mean() - half, x[:t].mean() + half)
            if t == n or all(lo > 0 or hi < 0 or (lo >= -shape.margin and hi <= shape.margin)
                             for lo, hi in ivs.values()):
                break
        stops.append(t)
        for p, (lo, hi) in ivs.items():
            truth = d[p].mean()
            ok &= bool((lo > 0 and truth > 0) or (hi < 0 and truth < 0)
                       or (lo <= 0 <= hi and abs(truth) <= shape.margin))
    return sum(stops) / (n * len(stops)), ok


def two_order_credits(shape: StudyShape, rng: np.random.Generator, own: float) -> tuple[np.ndarray, np.ndarray]:
    """(run accuracies, credits runs x items x 2 orders): the shape's latent model with the run's own part split
    into `own` shared by a judge's two orders of one item and the rest drawn per order (a position flip)."""
    from scipy.stats import norm

    common = shape.latent(rng, own)
    flip = np.sqrt(1 - shape.user_share - shape.item_share - own) * rng.standard_normal((*common.shape, 2))
    acc = shape.accuracies(rng)
    return acc, (common[:, :, None] + flip < norm.ppf(acc)[:, None, None]).astype(float)


def orders(shape: StudyShape, reps: int, seed: int, own: float) -> dict:
    """One seeded position per item against both orders, on the same simulated judges: judge calls spent (as a
    share of the both-orders study's), and how often every pair `decided` separated is in the order of the
    both-orders full study and of the judges' true accuracies."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list]] = {"one position": {}, "both orders": {}}
    agree_orders = []
    for _ in range(reps):
        acc, c = two_order_credits(shape, rng, own)
        agree_orders.append(float(np.mean(c[:, :, 0] == c[:, :, 1])))
        perm = rng.permutation(shape.items)
        both = c.mean(axis=2)[:, perm]
        one = c[:, np.arange(shape.items), rng.integers(0, 2, shape.items)][:, perm]
        full = both.mean(axis=1)
        for name, x, per_call in (("both orders", both, 1.0), ("one position", one, 0.5)):
            sim = simulate_study(shape, rng, credits=x)
            row = out[name]
            row.setdefault("calls", []).append(sim.call_fraction * per_call)
            for key, truth in (("agrees_both_orders_full", full), ("agrees_true_accuracies", acc)):
                ok = all(d == 0 or np.sign(truth[i] - truth[j]) == d for d, (i, j) in zip(sim.decisions, shape.pairs()))
                row.setdefault(key, []).append(ok)
    return {"shape": asdict(shape), "studies": reps, "seed": seed, "own_share": own,
            "orders_agree": float(np.mean(agree_orders)),
            **{name: {"calls_mean": float(np.mean(r["calls"])), "calls_se": float(np.std(r["calls"], ddof=1) / np.sqrt(reps)),
                      **{k: float(np.mean(r[k])) for k in ("agrees_both_orders_full", "agrees_true_accuracies")},
                      **{k + "_ci": wilson(sum(r[k]), reps) for k in ("agrees_both_orders_full", "agrees_true_accuracies")}}
               for name, r in out.items()}}


def wilson(k: float, n: int) -> list[float]:
    """A 95% Wilson interval for a share k/n (how far a simulated share can be trusted)."""
    p, z = k / n, 1.96
    mid, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    return [round(float(mid - half), 4), round(float(mid + half), 4)]


def run_shape(shape: StudyShape, policy: Policy, reps: int, seed: int, exact: bool = False) -> dict:
    """Simulate `reps` studies; every study's numbers are kept (`per_study`) so runs with other seeds merge."""
    t0 = time.time()
    sims = simulate(shape, reps, seed=seed, policy=policy, exact_runs=exact)
    seconds = time.time() - t0
    naive = [naive_peeking(shape, np.random.default_rng(seed + 10_000 + r)) for r in range(reps)]
    per = {"call_fraction": [round(s.call_fraction, 5) for s in sims],
           "ranking_reached": [s.ranking_reached for s in sims],
           "runs_covered": [round(s.runs_covered * len(s.n_stop)) for s in sims],
           "pairs_covered": [s.pairs_covered for s in sims],
           "run_share": [[round(n / shape.items, 5) for n in s.n_stop] for s in sims],
           "naive_call_fraction": [round(f, 5) for f, _ in naive], "naive_ranking_reached": [ok for _, ok in naive]}
    return summarize({"shape": asdict(shape), "policy": asdict(policy), "seeds": [seed], "seconds": round(seconds, 1),
                      "runs_checked": "exactly" if exact else "lower bound (the truth's two grid neighbours)",
                      "runs_per_study": len(sims[0].n_stop), "per_study": per})


def summarize(row: dict) -> dict:
    """The row's aggregates from its per-study numbers."""
    per, runs = row["per_study"], row["runs_per_study"]
    frac = np.array(per["call_fraction"])
    reps = len(frac)
    runs_ok, pairs_ok = sum(per["runs_covered"]), sum(per["pairs_covered"])
    return {**row, "studies": reps, "call_fraction_mean": float(frac.mean()),
            "call_fraction_se": float(frac.std(ddof=1) / np.sqrt(reps)) if reps > 1 else None,
            "call_fraction_p10_p50_p90": [float(q) for q in np.quantile(frac, [0.1, 0.5, 0.9])],
            "calls_saved": float(1 - frac.mean()), "ranking_reached": float(np.mean(per["ranking_reached"])),
            "runs_covered_at_every_item": runs_ok / (runs * reps), "runs_covered_ci": wilson(runs_ok, runs * reps),
            "studies_all_pairs_covered_at_every_item": pairs_ok / reps, "pairs_covered_ci": wilson(pairs_ok, reps),
            "naive_call_fraction_mean": float(np.mean(per["naive_call_fraction"])),
            "naive_ranking_reached": float(np.mean(per["naive_ranking_reached"])),
            **({"run_share_mean": [round(float(x), 5) for x in np.mean(per["run_share"], axis=0)]}
               if "run_share" in per else {})}


def merge(paths: list[Path]) -> dict:
    """Rows of several runs (other seeds) joined: per-study numbers concatenated, aggregates recomputed."""
    out: dict = {}
    for path in paths:
        for name, row in json.loads(path.read_text(encoding="utf-8")).items():
            if name in CHECKS or name not in out:
                out[name] = row
                continue
            mine = out[name]
            assert mine["shape"] == row["shape"] and mine["policy"] == row["policy"], name
            assert not set(mine["seeds"]) & set(row["seeds"]), f"{name}: the same seed twice"
            mine = {**mine, "seeds": mine["seeds"] + row["seeds"], "seconds": mine["seconds"] + row["seconds"],
                    "per_study": {k: mine["per_study"][k] + row["per_study"][k]
                                  for k in mine["per_study"] if k in row["per_study"]}}
            out[name] = summarize(mine)
    return out


def coverage(reps: int, seed: int) -> dict[str, float | int | list[float]]:
    """One run's accuracy on a 2,830-item, 283-user population (user-clustered credits, accuracy 0.55-0.75),
    items in a random order: the share of orders where the 95% sequence covers the full accuracy at every item,
    against the fixed-n 95% normal interval looked at after every item."""
    from scipy.stats import norm

    from prbench.stats import confseq

    rng = np.random.default_rng(seed + 7)
    n, batch = 2830, 50
    cs_ok = naive_ok = 0
    for start in range(0, reps, batch):
        rows = []
        for _ in range(min(batch, reps - start)):
            user = rng.integers(0, 283, n)
            latent = np.sqrt(0.05) * rng.standard_normal(283)[user] + np.sqrt(0.95) * rng.standard_normal(n)
            rows.append((latent < norm.ppf(rng.uniform(0.55, 0.75))).astype(float)[rng.permutation(n)])
        x = np.stack(rows)
        tau, _ = confseq.rejection_times(x, alpha=0.05, population=n, grid=1000)
        t = np.arange(1, n + 1)
        for r, row in enumerate(x):
            mu = row.mean()
            lo, hi = confseq.bounds(tau[r], row, population=n, grid=1000)
            cs_ok += bool(np.all((lo <= mu + 1e-12) & (hi >= mu - 1e-12)))
            m = np.cumsum(row) / t
            half = 1.96 * np.sqrt(np.maximum(m * (1 - m), 1e-12) / t)
            naive_ok += bool(np.all((m[29:] - half[29:] <= mu) & (m[29:] + half[29:] >= mu)))  # from 30 items on
    return {"sequences": reps, "covered_at_every_item": cs_ok / reps, "covered_ci": wilson(cs_ok, reps),
            "naive_covered_at_every_item_from_30": naive_ok / reps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=2000, help="Studies of the paper shape (the others a share).")
    ap.add_argument("--coverage", type=int, default=2000, help="Single-run sequences for the coverage check.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="Run only these shapes, separated by semicolons (NAME, or PREFIX* "
                                               "for every name it starts; 'coverage' for the coverage check).")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results_sequential.json"))
    ap.add_argument("--ship", action="store_true",
                    help="Only write the default-policy rows of --out into the package (the dry run reads them).")
    ap.add_argument("--exact-runs", action="store_true",
                    help="Check each run's coverage on its reported bounds (the whole grid; twice the time) instead "
                         "of the cheap lower bound.")
    ap.add_argument("--markdown", action="store_true", help="Only print --out as RESULTS_sequential.md's table.")
    ap.add_argument("--merge", type=Path, nargs="*", help="Only join these result files (other seeds) into --out.")
    args = ap.parse_args()
    if args.merge:
        write(args.out, merge(args.merge))
        return None
    if args.ship:
        return ship(json.loads(args.out.read_text(encoding="utf-8")))
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8"))))
        return None
    results = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() and args.only else {}
    for i, (name, (shape, policy, share)) in enumerate(SHAPES.items()):
        if args.only and not any(name == o or (o.endswith("*") and name.startswith(o[:-1]))
                                 for o in args.only.split(";")):
            continue
        reps = max(int(args.studies * share), 20)
        key = name + (" [runs checked exactly]" if args.exact_runs else "")
        results[key] = run_shape(shape, policy, reps, args.seed + (0 if name.startswith(("paper", "preset")) else i),
                                 args.exact_runs)
        print(json.dumps({key: {k: v for k, v in results[key].items() if k != "per_study"}}), flush=True)
        write(args.out, results)
    if args.only and "orders" in args.only.split(";"):  # not in a full run: it is its own question
        shape = SHAPES["preset, its judges' published accuracies (67.7 / 70.5 / 74.6)"][0]
        results["orders"] = orders(shape, max(int(args.studies * 0.2), 20), args.seed, ORDERS_OWN)
        print(json.dumps({"orders": results["orders"]}), flush=True)
        write(args.out, results)
    if not args.only or "coverage" in args.only.split(";"):
        results["coverage"] = coverage(args.coverage, args.seed)
        print(json.dumps({"coverage": results["coverage"]}), flush=True)
        write(args.out, results)


def write(path: Path, results: dict) -> None:
    """One row per line (the per-study lists make an indented file ten times longer)."""
    rows = ",\n".join(f"{json.dumps(name)}: {json.dumps(row)}" for name, row in results.items())
    path.write_text("{\n" + rows + "\n}\n", encoding="utf-8")


def markdown(results: dict) -> str:
    """The table of RESULTS_sequential.md from the results."""
    lines = [("| shape | studies | calls spent (mean +- se) | p10 / p50 / p90 | calls saved | full ranking reached "
             "| each run covered at every item (95% CI) | all pairs covered at every item (95% CI) | naive: calls / "
             "ranking reached |"), "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        if name in CHECKS:
            continue
        q = " / ".join(f"{x:.2f}" for x in r["call_fraction_p10_p50_p90"])
        lines.append(
            f"| {name} | {r['studies']:,} | {r['call_fraction_mean']:.3f} +- {r['call_fraction_se']:.3f} | {q} | "
            f"{r['calls_saved']:.1%} | {r['ranking_reached']:.1%} | {r['runs_covered_at_every_item']:.1%} "
            f"[{r['runs_covered_ci'][0]:.1%}, {r['runs_covered_ci'][1]:.1%}]"
            f"{'' if 'checked exactly' in name else ' (lower bound)'} | "
            f"{r['studies_all_pairs_covered_at_every_item']:.1%} [{r['pairs_covered_ci'][0]:.1%}, "
            f"{r['pairs_covered_ci'][1]:.1%}] | {r['naive_call_fraction_mean']:.2f} / {r['naive_ranking_reached']:.0%} |")
    if "orders" in results:
        o = results["orders"]
        title = (f"One seeded position per item against both orders (`--only orders`; {o['studies']:,} studies of "
                 f"the preset with its judges' published accuracies, a judge's two orders agreeing on "
                 f"{o['orders_agree']:.0%} of items):")
        head = ("| protocol | judge calls (share of both orders' full study) | every separated pair in the order of "
                "the judges' true accuracies | ... of the both-orders full study |")
        lines += ["", title, "", head, "|---|---:|---:|---:|"]
        for name in ("one position", "both orders"):
            r = o[name]
            lines.append(f"| {name} | {r['calls_mean']:.3f} +- {r['calls_se']:.3f} | {r['agrees_true_accuracies']:.1%} "
                         f"[{r['agrees_true_accuracies_ci'][0]:.1%}, {r['agrees_true_accuracies_ci'][1]:.1%}] | "
                         f"{r['agrees_both_orders_full']:.1%} [{r['agrees_both_orders_full_ci'][0]:.1%}, "
                         f"{r['agrees_both_orders_full_ci'][1]:.1%}] |")
    return "\n".join(lines)


def ship(results: dict) -> None:
    """The rows the dry run reads (`prbench.stats.seqsim.expected_share`): shapes simulated with the shipped policy."""
    rows = [{"name": name, **{k: r[k] for k in ("shape", "policy", "studies", "call_fraction_mean",
                                                 "call_fraction_se", "run_share_mean") if k in r}}
            for name, r in results.items() if name not in CHECKS and r["policy"] == asdict(Policy())]
    path = Path(__file__).parents[1] / "src" / "prbench" / EXPECTED_FILE
    path.write_text(json.dumps({"measured": time.strftime("%Y-%m-%d"), "shapes": rows}, indent=1) + "\n",
                    encoding="utf-8")


if __name__ == "__main__":
    main()
