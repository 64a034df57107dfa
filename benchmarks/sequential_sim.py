"""Simulated studies under `--until decided`: coverage at every look, the full ranking reached, judge calls saved.

Each study draws credits for judges x conditions on 2,830 items from 283 users (`prbench.sequential.StudyShape`),
orders the items at random and runs the stopping rule exactly as `prbench eval --until decided` does (same
confidence sequences, same looks, each condition's judges stopping together). The baseline is the full study
(every item, every run): its ranking is the truth the stopped study must reach; "naive" is the same rule applied
to fixed-n 95% normal intervals recomputed at every look, the peeking the confidence sequences replace.

    python benchmarks/sequential_sim.py --studies 500 --out benchmarks/results_sequential.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from prbench.sequential import StudyShape, schedule, simulate_study

SHAPES = {
    "paper": StudyShape(),
    "close judges (4 points)": StudyShape(judges=(0.61, 0.65, 0.69)),
    "judges agree more (item share 0.5)": StudyShape(item_share=0.5),
    "unstructured (uniform 0.55-0.75)": StudyShape(spread=(0.55, 0.75)),
}


def naive_peeking(shape: StudyShape, rng: np.random.Generator) -> tuple[float, bool]:
    """The same rule on fixed-n normal 95% intervals of each paired difference, looked at after every step:
    (call fraction, full ranking reached)."""
    from scipy.stats import norm

    n, k = shape.items, shape.models * shape.conditions
    user = rng.integers(0, shape.users, n)
    latent = (np.sqrt(shape.user_share) * rng.standard_normal(shape.users)[user]
              + np.sqrt(shape.item_share) * rng.standard_normal(n)
              + np.sqrt(1 - shape.user_share - shape.item_share) * rng.standard_normal((k, n)))
    credits = (latent < norm.ppf(shape.accuracies(rng))[:, None]).astype(float)[:, rng.permutation(n)]
    stops, ok = [], True
    for c in range(shape.conditions):
        runs = range(c * shape.models, (c + 1) * shape.models)
        pairs = [(i, j) for i in runs for j in runs if i < j]
        for t in schedule(n):
            verdicts = {}
            for i, j in pairs:
                d = credits[i, :t] - credits[j, :t]
                half = 1.96 * d.std(ddof=1) / np.sqrt(t) if t > 1 else 1.0
                lo, hi = d.mean() - half, d.mean() + half
                verdicts[(i, j)] = (lo, hi) if (lo > 0 or hi < 0 or (lo >= -shape.margin and hi <= shape.margin)) \
                    else None
            if all(verdicts.values()) or t == n:
                break
        stops.append(t)
        for (i, j), v in verdicts.items():
            truth = credits[i].mean() - credits[j].mean()
            if v is not None:
                lo, hi = v
                ok &= (lo > 0 and truth > 0) or (hi < 0 and truth < 0) or (lo <= 0 <= hi and abs(truth) <= shape.margin)
    return sum(stops) / (n * len(stops)), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=500, help="Studies of the paper shape (others get a fifth).")
    ap.add_argument("--coverage", type=int, default=2000,
                    help="Single-run sequences for the coverage check at every look (one judge, one condition).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results_sequential.json"))
    ap.add_argument("--coverage-only", action="store_true", help="Rerun only the coverage check into --out.")
    args = ap.parse_args()
    results = json.loads(args.out.read_text(encoding="utf-8")) if args.coverage_only else {}
    for i, (name, shape) in enumerate(SHAPES.items() if not args.coverage_only else ()):
        reps = args.studies if i == 0 else max(args.studies // 5, 20)
        rng = np.random.default_rng(args.seed + i)
        t0 = time.time()
        sims = [simulate_study(shape, rng) for _ in range(reps)]
        naive = [naive_peeking(shape, np.random.default_rng(args.seed + 1000 * (i + 1) + r)) for r in range(reps)]
        frac = np.array([s.call_fraction for s in sims])
        results[name] = {
            "shape": asdict(shape), "studies": reps, "seconds": round(time.time() - t0, 1),
            "call_fraction_mean": float(frac.mean()), "call_fraction_p10_p50_p90":
                [float(q) for q in np.quantile(frac, [0.1, 0.5, 0.9])],
            "calls_saved": float(1 - frac.mean()),
            "ranking_reached": float(np.mean([s.ranking_reached for s in sims])),
            "runs_covered_at_every_look": float(np.mean([s.runs_covered for s in sims])),  # per run
            "studies_all_pairs_covered_at_every_look": float(np.mean([s.pairs_covered for s in sims])),  # family
            "naive_call_fraction_mean": float(np.mean([f for f, _ in naive])),
            "naive_ranking_reached": float(np.mean([ok for _, ok in naive])),
        }
        print(json.dumps({name: results[name]}, indent=1), flush=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    results["coverage"] = coverage(args.coverage, args.seed)
    print(json.dumps({"coverage": results["coverage"]}, indent=1), flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def coverage(reps: int, seed: int) -> dict[str, float | int]:
    """One run's accuracy on a 2,830-item, 283-user population (user-clustered credits, accuracy 0.55-0.75),
    items in a random order: the share of orders where the 95% sequence covers the full accuracy at every look
    of `schedule`, against fixed-n 95% normal intervals looked at the same times."""
    from scipy.stats import norm

    from prbench.sequential import confidence_sequence

    rng = np.random.default_rng(seed + 7)
    looks = schedule(2830)
    cs_ok = naive_ok = 0
    for _ in range(reps):
        user = rng.integers(0, 283, 2830)
        latent = np.sqrt(0.05) * rng.standard_normal(283)[user] + np.sqrt(0.95) * rng.standard_normal(2830)
        x = (latent < norm.ppf(rng.uniform(0.55, 0.75))).astype(float)[rng.permutation(2830)]
        mu = x.mean()
        lo, hi = confidence_sequence(x, population=2830, times=looks, grid=400)
        cs_ok += bool(np.all((lo <= mu + 1e-12) & (hi >= mu - 1e-12)))  # at the last item both are the mean itself
        t = np.array(looks)
        m = np.cumsum(x)[t - 1] / t
        half = 1.96 * np.sqrt(m * (1 - m) / t)
        naive_ok += bool(np.all((m - half <= mu) & (m + half >= mu)))
    return {"sequences": reps, "looks": len(looks), "covered_at_every_look": cs_ok / reps,
            "naive_covered_at_every_look": naive_ok / reps}


if __name__ == "__main__":
    main()
