"""Sequential evaluation: score items in one seeded order and stop when the answer is known.

`--until ci=0.03` stops once every run's accuracy is known to +-0.03; `--until decided` once every pair
of models is separated (the interval of their difference excludes 0) or proven within a margin
(`decided=0.02`, the default margin). The intervals are anytime-valid confidence sequences, so looking
after every step costs no coverage: the hedged-capital betting CS of Waudby-Smith & Ramdas (2024),
"Estimating means of bounded random variables by betting", JRSS-B 86(1):1-27 (theta = 1/2, bets truncated
at 1/2 of their bound), with their aGRAPA bets (the approximate Kelly bet against each candidate mean:
on the Personalized RewardBench shape they stop `decided` at ~0.57 of the items where the predictable
plug-in bets needed ~0.75, benchmarks/RESULTS_sequential.md) and their without-replacement martingale:
items come in a uniformly random order (a hash of the
seed and the item id), so a prefix is a sample without replacement of the benchmark and the
sequence covers the full benchmark's accuracy, shrinking to it at the last item. Paired differences
d = credit_A - credit_B in [-1, 1] are mapped to (d + 1) / 2. With `decided` the level is split over
the pairs (Bonferroni), so the whole ranking holds at 95%.

Why not a library: `confseq` (0.0.11, 2022) implements these sequences (`confseq/betting.py`,
`hedged_cs`), but it builds a C++ extension and requires matplotlib, multiprocess and pytest at run
time; this is the same method in vectorised numpy over a grid of candidate means.

Items with an invalid record are not a sample of a known population (which items will be valid is
unknown in advance): when a prefix holds any, that sequence drops the without-replacement correction
and treats the valid items as independent draws (the superpopulation reading), which is wider.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, Literal

import numpy as np

from prbench import metrics
from prbench.errors import PrbenchError

ALPHA = 0.05
DEFAULT_MARGIN = 0.02
FIRST_STEP = 100  # items before the first look
GROWTH = 1.1  # each look scores 10% more items: at most a tenth past the stopping time


# -- the seeded order ---------------------------------------------------------------------------
def item_rank(seed: int, key: str) -> int:
    """An item's place in the seeded order: a hash of (seed, item id), so the order of two items never depends
    on which other items the data holds (a category filter or added items keep every other item's place)."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:8], "big")


def seeded_prefix(keys: Iterable[tuple[str, str]], seed: int, limit: int | None) -> tuple[int, dict[str, int]]:
    """(items in all, id -> place) for the first `limit` items of the seeded order.

    `keys`: (record id, item key) in benchmark order; the pairs of a multi-response item share a key and stay
    together, in benchmark order."""
    rows = [(item_rank(seed, key), pos, rid, key) for pos, (rid, key) in enumerate(keys)]
    rows.sort()
    kept: set[str] = set()
    order: dict[str, int] = {}
    for _, _, rid, key in rows:
        if key not in kept:
            if limit is not None and len(kept) >= limit:
                break
            kept.add(key)
        order[rid] = len(order)
    n_all = len({key for *_, key in rows})
    return n_all, order


# -- confidence sequences -----------------------------------------------------------------------
def confidence_sequence(x: Sequence[float] | np.ndarray, *, alpha: float = ALPHA, population: int | None = None,
                        times: Sequence[int] | None = None, grid: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of an anytime-valid (1 - alpha) confidence sequence for the mean of `x` in [0, 1].

    `population`: sampling without replacement from that many values (the mean of all of them is covered);
    None: independent draws. `times`: the prefix lengths to report (default every one); the bounds are the
    running intersection over them. `grid`: candidate means on [0, 1] (bounds are widened by one step).
    """
    x = np.asarray(x, dtype=float)
    T = len(x)
    if np.any((x < 0) | (x > 1)) or not np.all(np.isfinite(x)):
        raise PrbenchError("a confidence sequence needs values in [0, 1]")
    if population is not None and population < T:
        raise PrbenchError(f"{T} values drawn without replacement from a population of {population}")
    ts = np.arange(1, T + 1) if times is None else np.asarray(sorted(times), dtype=int)
    if T == 0 or len(ts) == 0:
        return np.zeros(len(ts)), np.ones(len(ts))
    if ts[0] < 1 or ts[-1] > T:
        raise PrbenchError(f"times must lie in 1..{T}")
    t = np.arange(1, T + 1, dtype=float)
    csum = np.cumsum(x)
    mu_hat = (0.5 + csum) / (t + 1)
    var_hat = (0.25 + np.cumsum((x - mu_hat) ** 2)) / (t + 1)
    var_prev = np.concatenate([[0.25], var_hat[:-1]])
    m = np.linspace(0.0, 1.0, grid + 1)[:, None]
    f32 = np.float32  # the (grid x T) work in single precision: capitals are compared on a log scale to ~6
    if population is None:
        mu_t = np.broadcast_to(m.astype(f32), (len(m), T))
    else:  # the mean of what is left under the null (Sec. 6)
        s_prev = np.concatenate([[0.0], csum[:-1]])
        mu_t = ((population * m - s_prev) / (population - t + 1)).astype(f32)
    possible = (mu_t >= 0) & (mu_t <= 1)
    mu_c = np.clip(mu_t, 0.0, 1.0)
    x32 = x.astype(f32)
    with np.errstate(divide="ignore"):
        # aGRAPA: the approximate Kelly bet against each candidate mean, from the items seen so far
        mu_prev = np.concatenate([[0.5], mu_hat[:-1]]).astype(f32)
        gap = mu_prev - mu_c
        kelly = gap / (var_prev.astype(f32) + gap**2)
        lam_pos = np.minimum(np.maximum(kelly, 0), f32(0.5) / mu_c)
        lam_neg = np.minimum(np.maximum(-kelly, 0), f32(0.5) / (1 - mu_c))
    dev = x32 - mu_c
    log_pos = np.cumsum(np.log1p(lam_pos * dev), axis=1, dtype=np.float64)
    log_neg = np.cumsum(np.log1p(-lam_neg * dev), axis=1, dtype=np.float64)
    ever_impossible = np.logical_or.accumulate(~possible, axis=1)
    idx = ts - 1
    inside = (np.maximum(log_pos[:, idx], log_neg[:, idx]) < math.log(2 / alpha)) & ~ever_impossible[:, idx]
    step = 1.0 / grid
    any_in = inside.any(axis=0)
    lo = np.where(any_in, m[np.argmax(inside, axis=0), 0] - step, 0.0)
    hi = np.where(any_in, m[len(m) - 1 - np.argmax(inside[::-1], axis=0), 0] + step, 1.0)
    if population is not None:  # what the items seen already fix, whatever the rest are
        lo = np.maximum(lo, csum[idx] / population)
        hi = np.minimum(hi, (csum[idx] + population - ts) / population)  # at the last item: lo == hi == the mean
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    return np.maximum.accumulate(lo), np.minimum.accumulate(hi)


@dataclass(frozen=True)
class Interval:
    """Where a run's accuracy (or a difference) lies, anytime-valid, after `n` items."""

    estimate: float
    low: float
    high: float
    n: int
    without_replacement: bool

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_interval(values: Sequence[float], *, population: int | None, alpha: float = ALPHA,
                  times: Sequence[int] | None = None) -> Interval:
    """The CS of a [0, 1] mean at its last time (running intersection over `times`, plus the last one)."""
    n = len(values)
    ts = sorted({*(t for t in (times or ()) if 1 <= t <= n), n}) if n else []
    lo, hi = confidence_sequence(values, alpha=alpha, population=population, times=ts)
    est = float(np.mean(values)) if n else float("nan")
    return Interval(est, float(lo[-1]) if n else 0.0, float(hi[-1]) if n else 1.0, n, population is not None)


def _item_credits(records: Sequence[dict[str, Any]]) -> list[tuple[str, float | None]]:
    return [(str(r["id"]), r.get("credit")) for r in metrics.collapse_items(records)]


def accuracy_interval(records: Sequence[dict[str, Any]], population: int, *, alpha: float = ALPHA,
                      times: Sequence[int] = ()) -> Interval:
    """A run's accuracy CS from its records in seeded order (`population`: items in the whole order)."""
    credits = _item_credits(records)
    valid = [c for _, c in credits if c is not None]
    wor = len(valid) == len(credits)
    shrink = len(valid) / max(len(credits), 1)
    return mean_interval(valid, population=population if wor else None, alpha=alpha,
                         times=[max(1, int(t * shrink)) for t in times])


def difference_interval(records_a: Sequence[dict[str, Any]], records_b: Sequence[dict[str, Any]], population: int,
                        *, alpha: float = ALPHA, times: Sequence[int] = ()) -> Interval:
    """CS of accuracy A - B on the items both scored (records in the same seeded order)."""
    a, b = _item_credits(records_a), dict(_item_credits(records_b))
    both = [(ca, b[i]) for i, ca in a if i in b]
    d = [(ca - cb + 1) / 2 for ca, cb in both if ca is not None and cb is not None]
    wor = len(d) == len(a) == len(b)
    shrink = len(d) / max(len(a), 1)
    iv = mean_interval(d, population=population if wor else None, alpha=alpha,
                       times=[max(1, int(t * shrink)) for t in times])
    return Interval(2 * iv.estimate - 1, 2 * iv.low - 1, 2 * iv.high - 1, iv.n, iv.without_replacement)


# -- stopping rules --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StopRule:
    """`ci=W`: every run's accuracy within +-W. `decided[=M]`: every pair separated or within +-M."""

    kind: Literal["ci", "decided"]
    value: float

    @classmethod
    def parse(cls, text: str) -> StopRule:
        m = re.fullmatch(r"\s*(ci|decided)\s*(?:=\s*([0-9]*\.?[0-9]+)\s*)?", text)
        if not m or (m.group(1) == "ci" and m.group(2) is None):
            raise PrbenchError(f"--until {text!r}: expected ci=WIDTH (e.g. ci=0.03) or decided[=MARGIN] "
                               f"(e.g. decided, decided=0.02)")
        value = float(m.group(2)) if m.group(2) else DEFAULT_MARGIN
        if not 0 < value < 1:
            raise PrbenchError(f"--until {text!r}: the width or margin must lie strictly between 0 and 1")
        return cls(m.group(1), value)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.kind}={self.value:g}"


@dataclass
class Look:
    """The state of all runs after one look: intervals, pairs, and whether the rule is met (and why)."""

    n: int
    runs: list[Interval]
    pairs: dict[tuple[int, int], Interval] = field(default_factory=dict)
    met: bool = False
    why: str = ""


def comparison_pairs(labels: Sequence[tuple[str, str]]) -> list[tuple[int, int]]:
    """The pairs `decided` must settle: models within each condition; with one model, its conditions."""
    models = {m for m, _ in labels}
    if len(models) == 1:
        return list(combinations(range(len(labels)), 2))
    return [(i, j) for i, j in combinations(range(len(labels)), 2) if labels[i][1] == labels[j][1]]


def stop_groups(labels: Sequence[tuple[str, str]], rule: StopRule) -> list[list[int]]:
    """Runs that stop together: under `ci` each run alone; under `decided` the models of one condition (with one
    model, all its conditions), so a condition whose ranking is known stops while another still runs."""
    if rule.kind == "ci":
        return [[i] for i in range(len(labels))]
    if len({m for m, _ in labels}) == 1:
        return [list(range(len(labels)))]
    conds = list(dict.fromkeys(c for _, c in labels))
    return [[i for i, (_, c) in enumerate(labels) if c == cond] for cond in conds]


def look(records: Sequence[Sequence[dict[str, Any]]], labels: Sequence[tuple[str, str]], population: int,
         rule: StopRule, *, times: Sequence[int] = (), alpha: float = ALPHA, pair_alpha: float | None = None) -> Look:
    """Every run's CS (and, for `decided`, every pair's at `pair_alpha`, default alpha over the pairs) at the
    current prefix, and the rule's verdict."""
    n = max((len(metrics.collapse_items(r)) for r in records), default=0)
    pairs = comparison_pairs(labels) if rule.kind == "decided" else []
    level = pair_alpha if pair_alpha is not None else alpha / max(len(pairs), 1)
    runs = [accuracy_interval(r, population, alpha=alpha, times=times) for r in records]
    out = Look(n, runs)
    name = [f"{m} [{c}]" for m, c in labels]
    if rule.kind == "ci":
        wide = [f"{name[i]} +-{iv.half_width:.3f}" for i, iv in enumerate(runs) if iv.half_width > rule.value]
        out.met = not wide
        out.why = (f"{', '.join(name)} accuracy within +-{rule.value:g} (+-{max(iv.half_width for iv in runs):.3f})"
                   if out.met else "wider: " + "; ".join(wide))
        return out
    if not pairs:  # one run: decided against chance
        iv = runs[0]
        out.met = iv.low > 0.5 or iv.high < 0.5 or (iv.low >= 0.5 - rule.value and iv.high <= 0.5 + rule.value)
        out.why = f"{name[0]} vs chance: [{iv.low:.3f}, {iv.high:.3f}]"
        return out
    open_pairs, said = [], []
    for i, j in pairs:
        iv = difference_interval(records[i], records[j], population, alpha=level, times=times)
        out.pairs[(i, j)] = iv
        if iv.low > 0 or iv.high < 0:
            said.append(f"{name[i] if iv.low > 0 else name[j]} > {name[j] if iv.low > 0 else name[i]}")
        elif iv.low >= -rule.value and iv.high <= rule.value:
            said.append(f"{name[i]} ~ {name[j]} (within +-{rule.value:g})")
        else:
            open_pairs.append(f"{name[i]} vs {name[j]} [{iv.low:+.3f}, {iv.high:+.3f}]")
    out.met = not open_pairs
    out.why = ("decided: " + "; ".join(said)) if out.met else "open: " + "; ".join(open_pairs)
    return out


def schedule(n_max: int, first: int = FIRST_STEP, growth: float = GROWTH) -> list[int]:
    """The prefix lengths looked at: `first`, then 10% more each time, ending at `n_max`."""
    steps, n = [], min(first, n_max)
    while n < n_max:
        steps.append(n)
        n = max(n + 1, math.ceil(n * growth))
    return [*steps, n_max]


@dataclass
class Stop:
    """How one group of runs ended: its runs (global indices), last look, items used and why."""

    runs: list[int]
    last: Look
    n_used: int
    stopped: str


@dataclass
class Outcome:
    """How a sequential evaluation ended: every run's last result and its group's stop."""

    results: list[Any]
    stops: list[Stop]
    rule: StopRule
    n_items: int
    labels: list[tuple[str, str]]

    def stop_of(self, index: int) -> Stop:
        return next(s for s in self.stops if index in s.runs)

    @property
    def n_used(self) -> int:
        """The most items any run used."""
        return max(s.n_used for s in self.stops)

    @property
    def met(self) -> bool:
        return all(s.last.met for s in self.stops)

    @property
    def stopped(self) -> str:
        return " | ".join(s.stopped for s in self.stops)

    def block(self, index: int) -> dict[str, Any]:
        """What run `index`'s summary records under `sequential`."""
        stop = self.stop_of(index)
        local = stop.runs.index(index)
        iv = stop.last.runs[local]
        name = [f"{m} [{c}]" for m, c in self.labels]
        pairs = {name[stop.runs[j if i == local else i]]: {
            "diff": p.estimate if i == local else -p.estimate,
            "low": p.low if i == local else -p.high, "high": p.high if i == local else -p.low}
            for (i, j), p in stop.last.pairs.items() if local in (i, j)}
        return {"rule": str(self.rule), "n_used": stop.n_used, "n_items": self.n_items, "stopped": stop.stopped,
                "confidence_sequence": asdict(iv), "level": 1 - ALPHA,
                "method": "betting CS, Waudby-Smith & Ramdas 2024 (hedged capital, aGRAPA bets, without replacement)",
                **({"versus": pairs} if pairs else {})}


def run_until(labels: Sequence[tuple[str, str]], evaluate_at: Callable[[int, int], Any], rule: StopRule, *,
              until_max: int | None = None, first: int = FIRST_STEP) -> Outcome:
    """Evaluate every run on a growing prefix of the seeded order until its group meets `rule` (`stop_groups`),
    `until_max` items are scored, or the benchmark runs out. `evaluate_at(run index, n)` returns that run's
    `EvalResult` on the first n items (each look extends the run folders; a stopped run resumes and extends like
    `--limit`). Pair intervals use alpha over all pairs of the evaluation, so the whole ranking holds at 95%."""
    if not labels:
        raise PrbenchError("nothing to evaluate")
    groups = stop_groups(labels, rule)
    pair_alpha = ALPHA / max(len(comparison_pairs(labels)), 1)
    results: list[Any] = [None] * len(labels)
    stops: dict[int, Stop] = {}
    n, looked, n_all = first, [], None
    while len(stops) < len(groups):
        for g, runs in enumerate(groups):
            if g not in stops:
                for i in runs:
                    results[i] = evaluate_at(i, n)
        if n_all is None:
            n_all = int(results[0].summary.get("order", {}).get("n_items") or results[0].summary["n_total"])
        cap = min(n_all, until_max) if until_max else n_all
        looked.append(min(n, n_all))
        for g, runs in enumerate(groups):
            if g in stops:
                continue
            state = look([results[i].records for i in runs], [labels[i] for i in runs], n_all, rule, times=looked,
                         pair_alpha=pair_alpha)
            if state.met:
                why = f"{rule} met at {state.n} of {n_all} items: {state.why}"
            elif state.n >= n_all:
                why = f"all {n_all} items scored ({rule} not met: {state.why})"
            elif state.n >= cap:
                why = f"--until-max {cap} reached ({rule} not met: {state.why})"
            else:
                continue
            stops[g] = Stop(runs, state, state.n, why)
        if len(stops) < len(groups):
            n = next(s for s in schedule(cap, first) if s > looked[-1])
    return Outcome(results, [stops[g] for g in range(len(groups))], rule, int(n_all or 0), list(labels))


def record_outcome(outcome: Outcome) -> list[dict[str, Any]]:
    """Each run's summary with the `sequential` block (rule, n used, why it stopped), written into its
    summary.json under the run folder's lock; the returned summaries describe the n used."""
    from prbench.runs import RunDir, read_json

    out = []
    for i, res in enumerate(outcome.results):
        block = outcome.block(i)
        if res.path is not None:
            run = RunDir(res.path, read_json(res.path / "config.json"), scope=("limit",))
            try:
                stored = run.previous_summary()
                if stored is not None:
                    run.write_summary({**stored, "sequential": block})
            finally:
                run.close()
        out.append({**res.summary, "sequential": block})
    return out


# -- simulation: what `--until decided` saves on a study of a given shape ----------------------------
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


@dataclass(frozen=True)
class SimulatedStudy:
    """One simulated study under `--until decided` (each condition's models stop together)."""

    call_fraction: float
    """Judge calls spent, as a share of the full study's."""
    n_stop: tuple[int, ...]
    """Items each condition used."""
    ranking_reached: bool
    """Every pair declared separated is in the full study's order, every pair declared tied is within the margin."""
    runs_covered: float
    """Share of the runs whose 95% sequence covered its full-study accuracy at every look up to their stop
    (each run's own guarantee: at least 0.95 in expectation)."""
    pairs_covered: bool
    """Every pair's sequence (at its Bonferroni level) covered the full-study difference at every look up to its stop."""


def simulate_study(shape: StudyShape, rng: np.random.Generator, *, grid: int = 200) -> SimulatedStudy:
    """Draw one study's credits (latent Gaussian with user and item components, thresholded at each run's
    accuracy), put the items in a random order and run `--until decided` over the looks of `schedule`."""
    from scipy.stats import norm

    n, k = shape.items, shape.models * shape.conditions
    user = rng.integers(0, shape.users, n)
    latent = (math.sqrt(shape.user_share) * rng.standard_normal(shape.users)[user]
              + math.sqrt(shape.item_share) * rng.standard_normal(n)
              + math.sqrt(1 - shape.user_share - shape.item_share) * rng.standard_normal((k, n)))
    acc = shape.accuracies(rng)
    credits = (latent < norm.ppf(acc)[:, None]).astype(float)[:, rng.permutation(n)]
    labels = [(f"m{r % shape.models}", f"c{r // shape.models}") for r in range(k)]
    level = ALPHA / max(len(comparison_pairs(labels)), 1)
    times = schedule(n)
    stops, reached, runs_ok, pairs_ok = [], True, 0, True
    for runs in stop_groups(labels, StopRule("decided", shape.margin)):
        pairs = [(runs[i], runs[j]) for i, j in comparison_pairs([labels[r] for r in runs])]
        truth = {p: credits[p[0]].mean() - credits[p[1]].mean() for p in pairs}
        for horizon in sorted({min(600, n), min(1500, n), n}):  # a sequence at t needs only the first t items
            ts = [t for t in times if t <= horizon]
            bounds = {p: [2 * b - 1 for b in confidence_sequence((credits[p[0]][:horizon] - credits[p[1]][:horizon]
                                                                  + 1) / 2, alpha=level, population=n, times=ts,
                                                                 grid=grid)] for p in pairs}
            at = next((i for i in range(len(ts)) if all(
                lo[i] > 0 or hi[i] < 0 or (lo[i] >= -shape.margin and hi[i] <= shape.margin)
                for lo, hi in bounds.values())), len(ts) - 1)
            if at < len(ts) - 1 or horizon == n:
                break
        reached &= all((lo[at] > 0 and truth[p] > 0) or (hi[at] < 0 and truth[p] < 0)
                       or (lo[at] <= 0 <= hi[at] and abs(truth[p]) <= shape.margin) for p, (lo, hi) in bounds.items())
        pairs_ok &= all(bool(np.all((lo[:at + 1] <= truth[p] + 1e-12) & (hi[:at + 1] >= truth[p] - 1e-12)))
                        for p, (lo, hi) in bounds.items())
        for r in runs:  # the runs' own sequences on the prefix they used
            lo, hi = confidence_sequence(credits[r][:times[at]], population=n, times=times[:at + 1], grid=grid)
            runs_ok += bool(np.all((lo <= credits[r].mean() + 1e-12) & (hi >= credits[r].mean() - 1e-12)))
        stops.append(times[at])
    return SimulatedStudy(sum(stops) / (n * len(stops)), tuple(stops), reached, runs_ok / k, pairs_ok)


def expected_call_fraction(shape: StudyShape | None = None, *, studies: int = 100, seed: int = 0) -> float:
    """The expected share of a full study's judge calls that `--until decided` spends, by simulating `studies`
    studies of `shape` (the dry run's "expected dollars under --until decided" multiplies by it)."""
    shape = shape or StudyShape()
    rng = np.random.default_rng(seed)
    return float(np.mean([simulate_study(shape, rng).call_fraction for _ in range(studies)]))
