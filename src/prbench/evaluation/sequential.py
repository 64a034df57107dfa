"""Sequential evaluation: score items in one seeded order and stop when the answer is known.

`--until ci=0.03` stops each run once its accuracy is known to +-0.03; `--until decided` stops each run once
every pair it is in is separated (the interval of their difference excludes 0) or proven within a margin
(`decided=0.02`, the default margin): racing, so a judge already ranked against all the others is not called
while two others are still being told apart. Models that send no API request are scored on every item first when
the evaluation also has API models (`RacePlan`): they cost no dollars, and a comparison with a fully known
accuracy needs only the API run's own sequence.

The intervals are anytime-valid confidence sequences (`prbench.stats.confseq`: the hedged-capital betting CS of
Waudby-Smith & Ramdas 2024, aGRAPA bets, without replacement), intersected over every item, so looking after
every step costs no coverage. Items come in a uniformly random order (a hash of the seed and the item id), so a
prefix is a sample without replacement of the benchmark and the sequence covers the full benchmark's accuracy,
shrinking to it at the last item. Paired differences d = credit_A - credit_B in [-1, 1] are mapped to
(d + 1) / 2. With `decided` the level is split (Bonferroni) over the sequences the ranking needs, so the whole
ranking holds at 95%. What this saves on a study of a given shape: `prbench.stats.seqsim`.

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

from prbench.errors import PrbenchError
from prbench.stats import confseq, metrics
from prbench.stats.confseq import ALPHA, DEFAULT_MARGIN, FIRST_STEP, GROWTH
from prbench.stats.seqsim import Policy, SimulatedStudy, StudyShape, expected_call_fraction, simulate_study


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
    None: independent draws. `times`: the prefix lengths to report (default every one); the sequence is the
    running intersection over every prefix length, whichever are reported. `grid`: candidate means on [0, 1]
    (bounds are widened by one step). The computation: `prbench.stats.confseq`.
    """
    x = np.asarray(x, dtype=float)
    T = len(x)
    confseq.check_values(x, population)
    ts = np.arange(1, T + 1) if times is None else np.asarray(sorted(times), dtype=int)
    if T == 0 or len(ts) == 0:
        return np.zeros(len(ts)), np.ones(len(ts))
    if ts[0] < 1 or ts[-1] > T:
        raise PrbenchError(f"times must lie in 1..{T}")
    tau = confseq.rejection_times(x[None, :], alpha=alpha, population=population, grid=grid)[0][0]
    lo, hi = confseq.bounds(tau, x, population=population, grid=grid)
    return lo[ts - 1], hi[ts - 1]


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
        return cls("ci" if m.group(1) == "ci" else "decided", value)

    def __str__(self) -> str:
        return f"{self.kind}={self.value:g}"


@dataclass
class Look:
    """One run's state when it stopped: its interval, its settled comparisons, and whether the rule is met (and
    why)."""

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


@dataclass(frozen=True)
class RacePlan:
    """How `decided` splits its 5% and which runs it scores in full first.

    Runs that send no API request (`paid` False) are scored on every item first when the evaluation also has API
    runs: they cost no dollars, and a comparison with a fully known accuracy needs only the API run's own
    sequence (one per API run, however many such partners it has) instead of one paired sequence per pair. Two
    fully known runs need no sequence at all (their difference is known). The level is split (Bonferroni) over
    the sequences left: paired differences of two API runs, and the own sequences of API runs with a known
    partner; so the whole ranking holds at 95%."""

    pairs: list[tuple[int, int]]
    known: frozenset[int]
    family: int

    @classmethod
    def of(cls, labels: Sequence[tuple[str, str]], paid: Sequence[bool] | None, full_first: bool = True) -> RacePlan:
        pairs = comparison_pairs(labels)
        known = frozenset(i for i, p in enumerate(paid or ()) if not p) if (
            full_first and paid is not None and any(paid) and not all(paid)) else frozenset()
        anchored = {a for i, j in pairs for a, b in ((i, j), (j, i)) if b in known and a not in known}
        both = [p for p in pairs if p[0] not in known and p[1] not in known]
        return cls(pairs, known, max(len(both) + len(anchored), 1))

    @property
    def level(self) -> float:
        return ALPHA / self.family


def _verdict(names: tuple[str, str], iv: Interval, margin: float) -> str | None:
    """What a pair's interval (of A - B) settles, or None while it is open."""
    if iv.low > 0 or iv.high < 0:
        return f"{names[0]} > {names[1]}" if iv.low > 0 else f"{names[1]} > {names[0]}"
    if iv.low >= -margin and iv.high <= margin:
        return f"{names[0]} ~ {names[1]} (within +-{margin:g})"
    return None


def _known_accuracy(records: Sequence[dict[str, Any]]) -> float:
    valid = [c for _, c in _item_credits(records) if c is not None]
    return float(np.mean(valid)) if valid else float("nan")


def pair_interval(plan: RacePlan, i: int, j: int, records: Sequence[Sequence[dict[str, Any]]],
                  population: int, own: dict[int, Interval] | None = None) -> Interval:
    """The interval of accuracy i - j under `plan`: known - known exactly, API - known from the API run's own
    sequence, API - API from the paired sequence (each at the plan's level). `own`: the API runs' own sequences
    of this look, filled as they are computed (one per run, however many known partners it has)."""
    own = {} if own is None else own
    if i in plan.known and j in plan.known:
        d = _known_accuracy(records[i]) - _known_accuracy(records[j])
        return Interval(d, d, d, population, True)
    if i in plan.known or j in plan.known:
        a, b = (j, i) if i in plan.known else (i, j)
        if a not in own:
            own[a] = accuracy_interval(records[a], population, alpha=plan.level)
        iv, known = own[a], _known_accuracy(records[b])
        sign = 1 if a == i else -1
        lo, hi = sorted((sign * (iv.low - known), sign * (iv.high - known)))
        return Interval(sign * (iv.estimate - known), lo, hi, iv.n, iv.without_replacement)
    return difference_interval(records[i], records[j], population, alpha=plan.level)


def first_look(n_items: int) -> int:
    """Items before the first look on a benchmark of `n_items`: a fifth of it (at least 10), at most `FIRST_STEP`.

    Why it scales: a fixed first look at 100 items scored all of a 63-pair sample before the rule could act, and
    then reported the exhausted data as the rule's decision."""
    return max(1, min(FIRST_STEP, max(10, math.ceil(n_items / 5)), n_items))


def count_items(data: str, *, categories: Sequence[str] | None = None, split: str = "test",
                format: str | None = None) -> int:
    """Items (the pairs of a multi-response item count once) in the data a sequential run orders: what
    `first_look` and the progress total are sized by. One pass over the data, as each look makes."""
    from prbench.data import iter_examples

    return len({getattr(ex, "item_id", None) or ex.id
                for ex in iter_examples(data, categories=categories, split=split, format=format)})


def schedule(n_max: int, first: int = FIRST_STEP, growth: float = GROWTH) -> list[int]:
    """The prefix lengths looked at: `first`, then 10% more each time, ending at `n_max`."""
    steps, n = [], min(first, n_max)
    while n < n_max:
        steps.append(n)
        n = max(n + 1, math.ceil(n * growth))
    return [*steps, n_max]


@dataclass
class Stop:
    """How one run ended: its index, last state, items used and why."""

    runs: list[int]
    last: Look
    n_used: int
    stopped: str


@dataclass
class Outcome:
    """How a sequential evaluation ended: every run's last result and its stop."""

    results: list[Any]
    stops: list[Stop]
    rule: StopRule
    n_items: int
    labels: list[tuple[str, str]]
    family: int = 1

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
        return " | ".join(dict.fromkeys(s.stopped for s in self.stops))

    @property
    def calls_share(self) -> float:
        """Items scored over all runs, as a share of every run on every item."""
        return sum(s.n_used for s in self.stops) / max(self.n_items * len(self.stops), 1)

    def block(self, index: int) -> dict[str, Any]:
        """What run `index`'s summary records under `sequential`."""
        stop = self.stop_of(index)
        iv = stop.last.runs[0]
        name = [f"{m} [{c}]" for m, c in self.labels]
        pairs = {name[j if i == index else i]: {
            "diff": p.estimate if i == index else -p.estimate,
            "low": p.low if i == index else -p.high, "high": p.high if i == index else -p.low}
            for (i, j), p in stop.last.pairs.items()}
        return {"rule": str(self.rule), "n_used": stop.n_used, "n_items": self.n_items, "stopped": stop.stopped,
                "decided_by_rule": not stop.stopped.startswith(RAN_OUT),
                "confidence_sequence": asdict(iv), "level": 1 - ALPHA,
                "method": "betting CS, Waudby-Smith & Ramdas 2024 (hedged capital, aGRAPA bets, without replacement)"
                          + (f"; pairs at 0.05/{self.family} each" if self.rule.kind == "decided" else ""),
                **({"versus": pairs} if pairs else {})}


@dataclass
class _Race:
    """The state of a sequential evaluation between looks."""

    labels: Sequence[tuple[str, str]]
    rule: StopRule
    plan: RacePlan
    results: list[Any]
    n_all: int = 0
    settled: dict[tuple[int, int], tuple[Interval, str]] = field(default_factory=dict)
    stops: dict[int, Stop] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f"{m} [{c}]" for m, c in self.labels]

    def records(self) -> list[Sequence[dict[str, Any]]]:
        return [r.records if r is not None else [] for r in self.results]

    def settle_pairs(self) -> None:
        records = self.records()
        own: dict[int, Interval] = {}
        for i, j in self.plan.pairs:
            if (i, j) not in self.settled and self.results[i] is not None and self.results[j] is not None:
                iv = pair_interval(self.plan, i, j, records, self.n_all, own)
                said = _verdict((self.names[i], self.names[j]), iv, self.rule.value)
                if said is not None:
                    self.settled[(i, j)] = (iv, said)

    def state(self, i: int) -> Look:
        """Run i's interval and whether its rule is met: `ci` its width; `decided` every pair it is in settled
        (a lone run: against chance)."""
        records = self.records()
        n = len(metrics.collapse_items(records[i]))
        mine = [p for p in self.plan.pairs if i in p]
        iv = accuracy_interval(records[i], self.n_all)
        if self.rule.kind == "ci":
            met = iv.half_width <= self.rule.value
            return Look(n, [iv], met=met, why=f"{self.names[i]} accuracy within +-{self.rule.value:g} "
                        f"(+-{iv.half_width:.3f})" if met else f"wider: {self.names[i]} +-{iv.half_width:.3f}")
        if not mine:
            m = self.rule.value
            met = iv.low > 0.5 or iv.high < 0.5 or (iv.low >= 0.5 - m and iv.high <= 0.5 + m)
            return Look(n, [iv], met=met, why=f"{self.names[i]} vs chance: [{iv.low:.3f}, {iv.high:.3f}]")
        done = {p: self.settled[p] for p in mine if p in self.settled}
        open_ = [f"{self.names[a]} vs {self.names[b]}" for a, b in mine if (a, b) not in done]
        pairs = {p: v[0] for p, v in done.items()}
        if open_:
            return Look(n, [iv], pairs, False, "open: " + "; ".join(open_))
        return Look(n, [iv], pairs, True, "decided: " + "; ".join(v[1] for v in done.values()))


def run_until(labels: Sequence[tuple[str, str]], evaluate_at: Callable[[int, int], Any], rule: StopRule, *,
              until_max: int | None = None, first: int = FIRST_STEP, paid: Sequence[bool] | None = None) -> Outcome:
    """Evaluate every run on a growing prefix of the seeded order until it meets `rule`, `until_max` items are
    scored, or the benchmark runs out. Under `ci` each run stops on its own; under `decided` a run stops once
    every pair it is in is settled (racing: a judge already separated from all the others is not called while
    two others are still close), and runs with `paid` False are scored in full first when others are paid
    (`RacePlan`). `evaluate_at(run index, n)` returns that run's `EvalResult` on the first n items (each look
    extends the run folders; a stopped run resumes and extends like `--limit`). The intervals are anytime-valid at
    every item, so a run may stop at any look."""
    if not labels:
        raise PrbenchError("nothing to evaluate")
    race = _Race(labels, rule, RacePlan.of(labels, paid, full_first=until_max is None) if rule.kind == "decided"
                 else RacePlan([], frozenset(), 1), [None] * len(labels))
    n, cap = first, 0
    while len(race.stops) < len(labels):
        for i in range(len(labels)):
            if i not in race.stops and i not in race.plan.known:
                race.results[i] = evaluate_at(i, n)
        if not race.n_all:
            head = next(r for r in race.results if r is not None)
            order = head.summary.order
            race.n_all = int(order.n_items if order is not None and order.n_items else head.summary.n_total)
            cap = min(race.n_all, until_max) if until_max else race.n_all
            for i in sorted(race.plan.known):  # no API calls: every item now
                race.results[i] = evaluate_at(i, race.n_all)
            if any(len(metrics.collapse_items(race.results[i].records)) < race.n_all for i in race.plan.known):
                race.plan = RacePlan.of(labels, paid, full_first=False)  # one holds fewer (a cap): not known in full
        race.settle_pairs()
        for i in range(len(labels)):
            if i in race.stops or i in race.plan.known:
                continue
            state = race.state(i)
            if n >= race.n_all:  # what was asked, not what came back: a run may hold fewer items (a planner cap)
                state, why = ran_out(state, rule, race.n_all)
            elif state.met:
                why = f"{rule} met at {state.n} of {race.n_all} items: {state.why}"
            elif n >= cap:
                why = f"--until-max {cap} reached ({rule} not met: {state.why})"
            else:
                continue
            race.stops[i] = Stop([i], state, state.n, why)
        if all(i in race.stops for i in range(len(labels)) if i not in race.plan.known):
            for i in sorted(race.plan.known):
                state = race.state(i)
                race.stops[i] = Stop([i], state, state.n, f"all {race.n_all} items scored first (no API calls; "
                                     f"{rule} {'met' if state.met else 'not met'}: {state.why})")
            break
        n = next(s for s in schedule(cap, first) if s > min(n, race.n_all))
    return Outcome(race.results, [race.stops[i] for i in range(len(labels))], rule, race.n_all, list(labels),
                   race.plan.family)


RAN_OUT = "ran out of items: the rule did not decide"


def ran_out(state: Look, rule: StopRule, n_all: int) -> tuple[Look, str]:
    """A run that scored every item before its rule stopped it: the rule decided nothing (on the whole benchmark
    a without-replacement sequence is exact, so `met` there is no decision), so nothing is declared and the
    answer is the fixed-n accuracy with its bootstrap CI."""
    why = (f"{RAN_OUT} (all {state.n} items scored before {rule} could stop the run; the answer is the fixed-n "
           f"accuracy and its 95% CI)")
    return Look(state.n, state.runs, met=False, why=why), why


def until_runs(labels: Sequence[tuple[str, str]], evaluate_at: Callable[[int, int, Callable[[int, int], None]], Any],
               rule: str, *, paid: Sequence[bool], until_max: int | None, n_items: int,
               on_progress: Callable[[int, int, int], None] | None = None) -> tuple[Outcome, list[dict[str, Any]]]:
    """What `prbench eval --until` and a study's `until` both run: the looks sized by the data (`first_look`),
    `run_until`, and each run's `sequential` block written (`record_outcome`).

    `evaluate_at(i, n, progress)` scores run i on the first n items of the seeded order, reporting
    `progress(done, total)`; `on_progress(i, done, total)` receives it with `total` the items the run may come to
    score (the data, or `until_max`), never a look's size."""
    total = min(n_items, until_max) if until_max else n_items

    def at(i: int, n: int) -> Any:
        def said(done: int, _look: int) -> None:
            if on_progress is not None:
                on_progress(i, done, total)
        return evaluate_at(i, n, said)

    outcome = run_until(labels, at, StopRule.parse(rule), until_max=until_max, paid=paid, first=first_look(n_items))
    return outcome, record_outcome(outcome)


def record_outcome(outcome: Outcome) -> list[dict[str, Any]]:
    """Each run's summary with the `sequential` block (rule, n used, why it stopped), written into its
    summary.json under the run folder's lock; the returned summaries describe the n used."""
    from prbench.store.runs import RunDir, read_json

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
        out.append({**res.written, "sequential": block})
    return out


__all__ = ["Policy", "SimulatedStudy", "StudyShape", "expected_call_fraction", "simulate_study"]
