"""The study's dollar forecast: what each planned run costs at list prices (synchronous, through batches, with
prompt caching), what `until: decided` is expected to spend, and what both answer orders would cost.

`forecast(cfg, root)` is what `prbench study --dry-run` prints (`prbench.cli.study`); the prices and the caching
rules are `prbench.cost`'s, the expected shares under `decided` `prbench.stats.seqsim`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from prbench.cost import PlannedCost
from prbench.stats.seqsim import Expected
from prbench.study.config import StudyConfig
from prbench.study.context import PlannedRun


@dataclass(frozen=True)
class Forecast:
    """A study's planned runs and their dollars (`forecast`)."""

    runs: list[PlannedRun]
    usd: list[PlannedCost | None]
    """Each run's dollars at list prices; None: the run sends no API request."""
    until: UntilPlan | None
    """The expected share of each run under `until: decided` (None: fewer than two API judges to rank)."""
    both_orders: tuple[float, float | None] | None
    """($ batch+cache, $ under `until: decided` or None) with both orders on every pairwise API judge that has one
    order now; None when none has."""

    @property
    def columns(self) -> list[tuple[str, Callable[[PlannedRun, PlannedCost], float]]]:
        """The dollar columns: `DOLLARS`, and the expected dollars under `until: decided` when there are any."""
        until = self.until
        return DOLLARS + ([(UNTIL_COLUMN, lambda r, u: u.batch_cache * until.share(r))] if until else [])

    def dollar_rows(self) -> tuple[list[str], list[tuple[str, ...]]]:
        """The closing table: per stage with API calls, then all (`dollar_rows`)."""
        return dollar_rows(self.runs, self.usd, self.columns)


def forecast(cfg: StudyConfig, root: Path) -> Forecast:
    """The dry run's numbers for a study: its planned runs, each one's dollars, the expected dollars under
    `until: decided` and the price of both answer orders."""
    from prbench.study.runner import plan_study

    runs = plan_study(cfg, root)
    usd = priced(cfg, runs)
    until = expected_until(cfg, runs, usd)
    return Forecast(runs, usd, until, swapped_orders(cfg, root, until))


def priced(cfg: StudyConfig, runs: list[PlannedRun]) -> list[PlannedCost | None]:
    """Each planned run's dollars (None: no API requests), as its route allows (batches, prompt caching)."""
    from prbench.cost import planned_dollars
    from prbench.engines.providers import batches_requests, caches_prompts, engine_provider
    from prbench.study.config import PlannerStage

    planner = cfg.section("planner", PlannerStage)
    options = {m.spec: m.options for m in cfg.models} | ({planner.spec: planner.options} if planner else {})
    return [planned_dollars(engine_provider(r.spec, options.get(r.spec)) if r.spec else None, r.model_calls, r.tokens,
                            prefix_tokens=r.prefix_tokens, calls_per_prefix=r.calls_per_prefix,
                            caches=r.spec is not None and caches_prompts(r.spec, options.get(r.spec)),
                            batches=r.spec is not None and batches_requests(r.spec, options.get(r.spec)))
            for r in runs]


def swapped_orders(cfg: StudyConfig, root: Path, until: UntilPlan | None) -> tuple[float, float | None] | None:
    """($ batch+cache, $ under `until: decided` or None without it) of the same study with both orders on every
    pairwise API judge that has one order now; None when none has."""
    from prbench.engines.providers import engine_provider
    from prbench.study.runner import plan_study

    if not any(m.pairwise and not m.both_orders and engine_provider(m.spec, m.options) for m in cfg.models):
        return None
    both = cfg.model_copy(update={"models": [m.model_copy(update={"both_orders": True}) if m.pairwise else m
                                             for m in cfg.models]})
    runs = plan_study(both, root)
    usd = priced(both, runs)
    total = sum(u.batch_cache for u in usd if u)
    return total, None if until is None else sum(u.batch_cache * until.share(r) for r, u in zip(runs, usd) if u)


UNTIL_COLUMN = "$ until decided (expected)"


@dataclass(frozen=True)
class UntilPlan:
    """The expected share of each planned run under `until: decided`."""

    expected: Expected
    conditions: list[str]
    ranks: dict[str, int] | None
    """Each API judge's rank by its published accuracy (the simulated run it is); None: none published."""

    def share(self, run: PlannedRun) -> float:
        """An eval run's expected share (its own when its judge's rank is known, else the mean); other stages 1."""
        if run.stage != "eval":
            return 1.0
        cond = self.conditions.index(run.condition) if run.condition in self.conditions else None
        rank = self.ranks.get(run.spec or "") if self.ranks else None
        return self.expected.share(cond, rank)


def expected_until(cfg: StudyConfig, runs: list[PlannedRun], usd: list[PlannedCost | None]) -> UntilPlan | None:
    """What `until: decided` is expected to spend on the eval stage (`prbench.stats.seqsim`), when it has two or more
    API judges to rank; None otherwise. The judges' accuracies: their published ones under `none` (the mean over
    categories) when every API judge has one, else the default shape's spacing (then every run gets the mean
    share: which judge is which is unknown)."""
    from prbench.engines.providers import engine_provider
    from prbench.stats.seqsim import expected_share, study_shape

    if "eval" not in cfg.stages:
        return None
    api = [m for m in cfg.models if engine_provider(m.spec, m.options)]
    paid = [r for r, u in zip(runs, usd) if r.stage == "eval" and u is not None]
    if len(api) < 2 or not paid:
        return None
    items = max(r.model_calls // max(r.calls_per_prefix, 1) for r in paid)
    published = [list(((m.published or {}).get("none") or {}).values()) for m in api]
    accuracies = tuple(sum(p) / len(p) / 100 for p in published) if all(published) else None
    shape = study_shape(items, len(api), len(cfg.conditions), len(cfg.models) - len(api), accuracies)
    note = ("the judges' published accuracies under none, mean over categories" if accuracies else
            "no published accuracy for every judge: the default shape's spacing")
    ranks = None if accuracies is None else {  # study_shape sorts the accuracies: rank = place in that order
        m.spec: rank for rank, (_, m) in enumerate(sorted(zip(accuracies, api), key=lambda am: round(am[0], 3)))}
    return UntilPlan(replace(expected_share(shape), note=note), list(cfg.conditions), ranks)


def dollar_rows(runs: list[PlannedRun], usd: list[PlannedCost | None],
                columns: list[tuple[str, Callable[[PlannedRun, PlannedCost], float]]] | None = None
                ) -> tuple[list[str], list[tuple[str, ...]]]:
    """The dry run's closing table: per stage with API calls, then all. Its columns are `DOLLARS` (or `columns`:
    the dry run adds the expected dollars under `until: decided`)."""
    columns = columns or DOLLARS
    by_stage: dict[str, list[float]] = {}
    for r, u in zip(runs, usd):
        if u:
            acc = by_stage.setdefault(r.stage, [0.0] * (2 + len(columns)))
            acc[0] += r.model_calls
            acc[1] += r.tokens
            for n, (_, of) in enumerate(columns, 2):
                acc[n] += of(r, u)
    if not by_stage:
        return [], []
    total = [sum(col) for col in zip(*by_stage.values())]
    rows = [(name, f"{v[0]:,.0f}", f"{v[1] / 1e6:,.1f} M", *(f"{x:,.2f}" for x in v[2:]))
            for name, v in [*by_stage.items(), ("all", total)]]
    return ["stage", "calls", "input tokens", *(name for name, _ in columns)], rows


DOLLARS: list[tuple[str, Callable[[PlannedRun, PlannedCost], float]]] = [
    ("$ sync", lambda r, u: u.sync), ("$ batch", lambda r, u: u.batch), ("$ batch+cache", lambda r, u: u.batch_cache)]


