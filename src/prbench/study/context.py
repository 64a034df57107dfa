"""What study stages share: the context they run in, planned runs, and the Stage type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prbench.study.config import StudyConfig


@dataclass
class StudyContext:
    """Where a study writes, and what its stages hand each other."""

    cfg: StudyConfig
    root: Path
    quiet: bool = False
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        p = Path(self.cfg.out)
        return p if p.is_absolute() else self.root / p

    @property
    def runs(self) -> Path:
        return self.out / "runs"

    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    @property
    def data(self) -> str:
        return self.resolve_data(self.cfg.data)

    def resolve_data(self, d: str) -> str:
        """A data path relative to the config's folder when it exists there, else as given."""
        p = Path(d)
        return str(self.root / p) if not p.is_absolute() and (self.root / p).exists() else d


@dataclass
class PlannedRun:
    stage: str
    what: str
    model_calls: int
    tokens: int
    spec: str | None = None  # the model the calls go to (prices an API model's calls in the dry run)
    prefix_tokens: int = 0  # tokens at the start of each call shared by `calls_per_prefix` calls (prompt caching)
    calls_per_prefix: int = 1
    condition: str | None = None  # an eval run's input condition (the dry run's expected share under `decided`)


StageFn = Callable[[StudyContext], None]
PlanFn = Callable[[StudyContext], list[PlannedRun]]


Check = Callable[[StudyConfig], list[tuple[tuple[Any, ...], str]]]


@dataclass(frozen=True)
class Stage:
    """A study stage: its dry-run planner and its runner (registered in `prbench.registry.STAGES`).

    `order` places it among the others (stages run by rank, whatever order the config lists
    them in): plan 10, eval 20, sample 30, bon 40, rl 50, rgd 60, policy_accuracy 70,
    personalize 80, meta 90, report 100; a plug-in metric's stage goes between 70 and 90 so
    meta and the report see its runs. `section`: the pydantic model of the stage's own
    top-level config section (validated when the study loads; read as `cfg.section(key, model)`),
    or None; `key`: that section's key when it is not the stage's name (`planner:` is `plan`'s).
    `needs`: the sections the stage cannot run without (default: its own), `why`: what they give
    it (said when one is missing); `checks`: what else it asks of the config, as (YAML location,
    message) pairs, when the study runs it. Built-in and plug-in stages declare all this alike.
    """

    name: str
    plan: PlanFn
    run: StageFn
    order: float = 85
    section: Any = None
    key: str | None = None
    needs: tuple[str, ...] | None = None
    why: str = ""
    checks: Check | None = None

    @property
    def section_key(self) -> str:
        """The top-level key of its section in the study file."""
        return self.key or self.name

    @property
    def needed(self) -> tuple[str, ...]:
        """The section keys it needs."""
        return self.needs if self.needs is not None else (self.section_key,) if self.section is not None else ()


def stage(name: str, plan: PlanFn, order: float = 85, section: Any = None, **declared: Any
          ) -> Callable[[StageFn], Stage]:
    """Make a runner function into a Stage with its dry-run planner, rank, section model and needs."""
    def wrap(fn: StageFn) -> Stage:
        return Stage(name, plan, fn, order, section, **declared)
    return wrap
