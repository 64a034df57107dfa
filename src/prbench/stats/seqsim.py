"""Simulated studies under `--until decided`: what stopping saves on a study of a given shape, and whether the
confidence sequences cover at every look.

Why a simulation: the calls `decided` spends depend on how far apart the models are, which no formula gives for
a ranking of several runs; the dry run's expected dollars and benchmarks/sequential_sim.py both read it from
here. The rule is the one `prbench.evaluation.sequential.run_until` applies (same sequences from `prbench.stats.confseq`, same
level split over the pairs, same looks, the same retirement of a run whose pairs are all decided).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from itertools import combinations

import numpy as np

from prbench.stats import confseq
from prbench.stats.confseq import ALPHA, DEFAULT_MARGIN, FIRST_STEP, GROWTH


@dataclass(frozen=True)
class StudyShape:
    """A study to simulate: judges x conditions on `items` pairs from `users` users.

    The default is the Personalized RewardBench preset's shape (2,830 pairs, 3 judges, 5 conditions): judges
    a few points apart whose order holds in every condition, conditions moving every judge together, each run's
    accuracy jittered, all within 0.55-0.75. `spread` instead draws every run's accuracy independently and
    uniformly from it (no structure: close pairs are common, the hard case for `decided`).
    """

    items: int = 2830
    users: int = 283
    judges: tuple[float, ...] = (0.57, 0.64, 0.71)
    """Each judge's accuracy before the condition's shift."""
    shifts: tuple[float, ...] = (-0.02, 0.0, 0.01, 0.04, -0.01)
    """Each condition's shift of every judge's accuracy."""
    jitter: float = 0.01
    """Standard deviation of each run's own deviation."""
    spread: tuple[float, float] | None = None
    """Draw every run's accuracy uniformly from this range instead."""
    user_share: float = 0.05
    """Share of the latent variance common to a user's items (the intra-user correlation of the latent)."""
    item_share: float = 0.30
    """Share common to an item across judges and conditions (hard items are hard for every judge)."""
    margin: float = DEFAULT_MARGIN
    family: int | None = None
    """Pairs the 5% is split over (None: the judges' own pairs; a study with other models has more)."""

    @property
    def models(self) -> int:
        return len(self.judges)

    @property
    def conditions(self) -> int:
        return len(self.shifts)

    def accuracies(self, rng: np.random.Generator) -> np.ndarray:
        """One study's run accuracies, judge-major within each condition (run r = condition r // judges)."""
        k = self.models * self.conditions
        if self.spread is not None:
            return rng.uniform(*self.spread, size=k)
        base = np.add.outer(np.asarray(self.shifts), np.asarray(self.judges)).ravel()
        return np.clip(base + self.jitter * rng.standard_normal(k), 0.01, 0.99)

    def pairs(self) -> list[tuple[int, int]]:
        """The pairs `decided` settles: judges within each condition (run indices)."""
        j = self.models
        return [(c * j + a, c * j + b) for c in range(self.conditions) for a, b in combinations(range(j), 2)]

    def credits(self, rng: np.random.Generator) -> np.ndarray:
        """One study's credits (runs x items, items in a random order): a latent Gaussian with user and item
        components, thresholded at each run's accuracy."""
        from scipy.stats import norm

        latent = self.latent(rng, 1 - self.user_share - self.item_share)
        return (latent < norm.ppf(self.accuracies(rng))[:, None]).astype(float)[:, rng.permutation(self.items)]

    def latent(self, rng: np.random.Generator, run_share: float) -> np.ndarray:
        """The latent (runs x items): the user and item parts, and `run_share` of the variance drawn per run and
        item (the rest of it, when `run_share` leaves some, is the caller's: say, a judge's two orders)."""
        n, k = self.items, self.models * self.conditions
        user = rng.integers(0, self.users, n)
        return (math.sqrt(self.user_share) * rng.standard_normal(self.users)[user]
                + math.sqrt(self.item_share) * rng.standard_normal(n)
                + math.sqrt(run_share) * rng.standard_normal((k, n)))


@dataclass(frozen=True)
class Policy:
    """How `decided` is run: when it looks, and whether a run whose pairs are all decided stops on its own."""

    retire: bool = True
    """A run stops once every pair it is in is decided (False: a condition's runs stop together)."""
    growth: float | None = GROWTH
    """Each look scores this factor more items (None: a look after every item)."""
    first: int = FIRST_STEP

    def looks(self, n: int) -> np.ndarray:
        if self.growth is None:
            return np.arange(1, n + 1)
        steps, t = [], min(self.first, n)
        while t < n:
            steps.append(t)
            t = max(t + 1, math.ceil(t * self.growth))
        return np.array([*steps, n])


@dataclass(frozen=True)
class SimulatedStudy:
    """One simulated study under `--until decided`."""

    call_fraction: float
    """Judge calls spent, as a share of the full study's."""
    n_stop: tuple[int, ...]
    """Items each run used (run r: condition r // judges)."""
    ranking_reached: bool
    """Every pair declared separated is in the full study's order, every pair declared tied is within the margin."""
    runs_covered: float
    """Share of the runs whose 95% sequence covered its full-study accuracy at every item up to their stop."""
    pairs_covered: bool
    """Every pair's sequence (at its share of the level) covered the full-study difference at every item up to
    its decision: the whole ranking's guarantee."""
    decisions: tuple[int, ...] = ()
    """Per pair of `shape.pairs()`: 1 the first run separated above the second, -1 below, 0 proven within the
    margin (at the last item the bounds are the full study's own difference)."""


def _decided(lo: np.ndarray, hi: np.ndarray, margin: float) -> np.ndarray:
    """Separated, or within +-margin, on the [0, 1] scale of (d + 1) / 2."""
    return (lo > 0.5) | (hi < 0.5) | ((lo >= 0.5 - margin / 2) & (hi <= 0.5 + margin / 2))


def simulate_study(shape: StudyShape, rng: np.random.Generator, *, policy: Policy = Policy(),
                   grid: int = 1000, exact_runs: bool = False, credits: np.ndarray | None = None) -> SimulatedStudy:
    """Draw one study and run `decided` on it as `prbench.evaluation.sequential.run_until` does. `exact_runs`: check each
    run's coverage on the bounds a summary reports (the whole grid) instead of the cheap lower bound. `credits`:
    the study's (runs x items, in their random order) instead of drawing them from `shape`."""
    credits = shape.credits(rng) if credits is None else credits
    k, n = credits.shape
    pairs = shape.pairs()
    level = ALPHA / (shape.family or len(pairs))
    looks = policy.looks(n)
    x = (credits[[i for i, _ in pairs]] - credits[[j for _, j in pairs]] + 1) / 2

    def at_look(lo: np.ndarray, hi: np.ndarray) -> int | None:
        """The first look (item count) at which a pair is decided, within the bounds given."""
        ls = looks[looks <= len(lo)]
        hit = np.flatnonzero(_decided(lo[ls - 1], hi[ls - 1], shape.margin))
        return int(ls[hit[0]]) if len(hit) else None

    tau, _ = confseq.rejection_times(x, alpha=level, population=n, grid=grid,
                                     settled=lambda _, b, t: np.array([at_look(lo, hi) is not None for lo, hi in b]))
    bounds = [confseq.bounds(tau[p], x[p], population=n, grid=grid) for p in range(len(pairs))]
    decided_at = [at_look(lo, hi) or n for lo, hi in bounds]
    truth = x.mean(axis=1)
    reached, pairs_ok = True, True
    decisions = []
    for p, (lo, hi) in enumerate(bounds):
        t = decided_at[p]
        separated = lo[t - 1] > 0.5 or hi[t - 1] < 0.5
        decisions.append(1 if lo[t - 1] > 0.5 else -1 if hi[t - 1] < 0.5 else 0)
        reached &= bool((lo[t - 1] > 0.5 and truth[p] > 0.5) or (hi[t - 1] < 0.5 and truth[p] < 0.5)
                        or (not separated and abs(2 * truth[p] - 1) <= shape.margin + 1e-12))
        pairs_ok &= bool(np.all((lo[:t] <= truth[p] + 1e-12) & (hi[:t] >= truth[p] - 1e-12)))
    stop = np.zeros(k, dtype=int)
    for p, (i, j) in enumerate(pairs):
        stop[i], stop[j] = max(stop[i], decided_at[p]), max(stop[j], decided_at[p])
    if not policy.retire:  # a condition's runs stop together
        per = shape.models
        stop = np.repeat(stop.reshape(-1, per).max(axis=1), per)
    return SimulatedStudy(float(stop.sum() / (n * k)), tuple(int(s) for s in stop), reached,
                          (_runs_covered_exactly if exact_runs else _runs_covered)(credits, stop, grid), pairs_ok,
                          tuple(decisions))


def _runs_covered(credits: np.ndarray, stop: np.ndarray, grid: int) -> float:
    """Share of runs whose own 95% sequence held its full-study accuracy at every item up to the run's stop,
    checked on the two grid points around the truth: while either is still in, the reported bounds (the hull of
    the candidates in, widened by one step) hold the truth. Both out counts as a miss, so this is a lower bound on
    the coverage of the bounds a summary reports (cheap: two candidates per run, not the grid)."""
    n = credits.shape[1]
    mu = credits.mean(axis=1)
    near = np.stack([np.floor(mu * grid), np.ceil(mu * grid)], axis=1) / grid
    tau, _ = confseq.rejection_times(credits, alpha=ALPHA, population=n, grid=grid, means=near)
    return float(np.mean(tau.max(axis=1) > stop))


def _runs_covered_exactly(credits: np.ndarray, stop: np.ndarray, grid: int) -> float:
    """Share of runs whose own 95% sequence, the bounds a summary reports, held its full-study accuracy at every
    item up to the run's stop."""
    n = credits.shape[1]
    tau, _ = confseq.rejection_times(credits, alpha=ALPHA, population=n, grid=grid,
                                     settled=lambda rows, _, t: t >= stop[rows])
    ok = 0
    for r, mu in enumerate(credits.mean(axis=1)):
        lo, hi = confseq.bounds(tau[r], credits[r, :stop[r]], population=n, grid=grid)
        ok += bool(np.all((lo <= mu + 1e-12) & (hi >= mu - 1e-12)))
    return ok / len(credits)


def simulate(shape: StudyShape, studies: int, *, seed: int = 0, policy: Policy = Policy(),
             grid: int = 1000, exact_runs: bool = False) -> list[SimulatedStudy]:
    rng = np.random.default_rng(seed)
    return [simulate_study(shape, rng, policy=policy, grid=grid, exact_runs=exact_runs) for _ in range(studies)]


def expected_call_fraction(shape: StudyShape | None = None, *, studies: int = 100, seed: int = 0,
                           policy: Policy = Policy()) -> float:
    """The expected share of a full study's judge calls that `--until decided` spends, by simulating `studies`
    studies of `shape`."""
    return float(np.mean([s.call_fraction for s in simulate(shape or StudyShape(), studies, seed=seed,
                                                             policy=policy)]))


# -- what the dry run reads: the expected share of a study's judge calls under `decided` --------------------
EXPECTED_FILE = "seqsim_expected.json"  # written by benchmarks/sequential_sim.py (package data)
LIVE_STUDIES = 20


@dataclass(frozen=True)
class Expected:
    """The expected share of a study's judge calls under `--until decided`, and where it comes from."""

    fraction: float
    studies: int
    shape: StudyShape
    source: str
    note: str = ""
    """Where the judges' accuracies come from (the dry run's words)."""
    run_shares: tuple[float, ...] | None = None
    """Each run's own mean share (run r: condition r // judges, the r % judges-th lowest judge): the judges in
    the closest pairs run longest, so a dollar total weighs each run's price by its own share."""

    def share(self, condition: int | None, judge_rank: int | None) -> float:
        """The expected share of one run (its condition's index, its judge's rank by accuracy), else the mean."""
        if self.run_shares is None or condition is None or judge_rank is None:
            return self.fraction
        return self.run_shares[condition * self.shape.models + judge_rank]


def study_shape(items: int, judges: int, conditions: int, free_models: int,
                accuracies: tuple[float, ...] | None = None) -> StudyShape:
    """The shape a dry run simulates: `judges` API judges in each of `conditions` conditions at `accuracies`
    (else spaced like the default shape's, 0.57-0.71), shifted by the default condition shifts; with models that
    send no API request (`free_models`), those are scored first and each judge's own sequence joins the judges'
    pairs in the level split (`prbench.evaluation.sequential.RacePlan`)."""
    base = StudyShape()
    accs = tuple(sorted(round(float(a), 3) for a in accuracies)) if accuracies else tuple(
        round(float(a), 4) for a in np.linspace(base.judges[0], base.judges[-1], judges))
    shifts = tuple((base.shifts * (conditions // len(base.shifts) + 1))[:conditions])
    pairs = conditions * judges * (judges - 1) // 2
    return StudyShape(items=items, users=max(items // 10, 1), judges=accs, shifts=shifts,
                      family=pairs + conditions * judges if free_models else None)


def _same(a: object, b: object) -> bool:
    return json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def shipped() -> dict:
    """The benchmark's measured rows (package data): {"measured": date, "shapes": [row, ...]}."""
    return json.loads(resources.files("prbench.stats").joinpath(EXPECTED_FILE).read_text(encoding="utf-8"))


def shipped_share(shape: StudyShape, policy: Policy = Policy()) -> Expected | None:
    """The benchmark's measured share for `shape` (package data), or None when it did not simulate that shape."""
    table = shipped()
    for row in table["shapes"]:
        if _same(row["shape"], asdict(shape)) and _same(row["policy"], asdict(policy)):
            shares = row.get("run_share_mean")
            return Expected(row["call_fraction_mean"], row["studies"], shape,
                            f"benchmarks/sequential_sim.py, {table['measured']}",
                            run_shares=tuple(shares) if shares else None)
    return None


def expected_share(shape: StudyShape, policy: Policy = Policy()) -> Expected:
    """The benchmark's measured share for `shape` when it simulated that shape, else a quick simulation now
    (LIVE_STUDIES studies)."""
    found = shipped_share(shape, policy)
    if found is not None:
        return found
    sims = simulate(shape, LIVE_STUDIES, policy=policy)
    return Expected(float(np.mean([s.call_fraction for s in sims])), LIVE_STUDIES, shape, "simulated now",
                    run_shares=run_share_means(sims, shape.items))


def run_share_means(sims: list[SimulatedStudy], items: int) -> tuple[float, ...]:
    """Each run's mean share of the items over the studies."""
    return tuple(float(x) for x in np.mean([s.n_stop for s in sims], axis=0) / items)
