"""What study stages share: the context they run in, planned runs, and the Stage type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from prbench.errors import PrbenchError
from prbench.store.records import OptionalFields
from prbench.study.config import StudyConfig


class _Output(OptionalFields, BaseModel):  # BaseModel named too: linters see a pydantic model
    """A stage's output record; `optional` fields are left out of `--json` when unset, as the stages always wrote."""

    model_config = ConfigDict(extra="forbid")


class EvalOutput(_Output):
    """One eval run of the study: `data` for another benchmark's runs, `sequential` under `until`."""

    optional: ClassVar[tuple[str, ...]] = ("data", "sequential")
    spec: str
    condition: str
    path: str
    data: str | None = None
    accuracy: float | None
    sequential: dict[str, Any] | None = None


class PlanOutput(_Output):
    """The planner file: `skipped` when every item was planned already, else `failures`."""

    optional: ClassVar[tuple[str, ...]] = ("skipped", "failures")
    path: str
    written: int
    skipped: int | None = None
    failures: int | None = None


class SampleOutput(_Output):
    path: str
    items: int
    n: int


class BonOutput(_Output):
    path: str
    rms: list[str]


class MetaOutput(_Output):
    """meta.json (and its CSV and Markdown when written now; `reused` when it was up to date)."""

    optional: ClassVar[tuple[str, ...]] = ("csv", "md", "reused")
    json_file: str = Field(alias="json")
    csv: str | None = None
    md: str | None = None
    reused: bool | None = None


class PersonalizeOutput(_Output):
    json_file: str = Field(alias="json")
    best_unseen_k0: str | None


class StudyOutputs(BaseModel):
    """What each stage made, one typed field per built-in stage; a plug-in stage's files under its name.

    `prbench study --json` prints `dump()`: the stages in the order they ran, then `timings`.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    plan: PlanOutput | None = None
    eval: list[EvalOutput] | None = None
    sample: SampleOutput | None = None
    bon: BonOutput | None = None
    rl: list[str] | None = None
    rgd: list[str] | None = None
    policy_accuracy: list[str] | None = None
    personalize: PersonalizeOutput | None = None
    meta: MetaOutput | str | None = None  # a string: why it was skipped
    report: str | None = None
    timings: dict[str, float] | None = None
    plugins: dict[str, list[str]] = {}

    def __setitem__(self, stage: str, files: Sequence[str | Path]) -> None:
        """A plug-in stage's files (`ctx.outputs["agree"] = [...]`); a built-in stage sets its own field."""
        if stage in type(self).model_fields:
            raise PrbenchError(f"study outputs: {stage!r} is a built-in stage's field; set ctx.outputs.{stage}")
        self.plugins[stage] = [str(f) for f in files]

    def dump(self) -> dict[str, Any]:
        """The outputs as `--json` prints them: each stage's by its name, in the order the stages ran, then timings."""
        made = {name: v for name, v in self.model_dump(by_alias=True, exclude={"timings", "plugins"}).items()
                if v is not None}
        made.update(self.plugins)
        ran = [n for n in (self.timings or {}) if n in made]
        out = {n: made[n] for n in [*ran, *(n for n in made if n not in ran)]}
        if self.timings is not None:
            out["timings"] = self.timings
        return out


@dataclass
class StudyContext:
    """Where a study writes, and what its stages hand each other."""

    cfg: StudyConfig
    root: Path
    quiet: bool = False
    outputs: StudyOutputs = field(default_factory=StudyOutputs)
    progress: Any = None  # the study's progress display while stages run (None when quiet)

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
