"""Run a study's stages in order, each through the same API (and run folders) as its command.

Every stage is resumable on its own (run folders + content-hash caches), so re-running a
study skips finished work, and changing one model's entry reruns only that model's runs:
run folders are keyed by (spec, options, data, condition).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from prbench.cli.output import progress
from prbench.errors import PrbenchError
from prbench.study.config import STAGE_ORDER, StudyConfig


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
        d = self.cfg.data
        p = Path(d)
        return str(self.root / p) if not p.is_absolute() and (self.root / p).exists() else d


@dataclass
class PlannedRun:
    stage: str
    what: str
    model_calls: int
    tokens: int


StageFn = Callable[[StudyContext], None]
PlanFn = Callable[[StudyContext], list[PlannedRun]]
STAGES: dict[str, tuple[PlanFn, StageFn]] = {}


def stage(name: str, plan: PlanFn) -> Callable[[StageFn], StageFn]:
    """Register a stage runner with its dry-run planner."""
    def wrap(fn: StageFn) -> StageFn:
        STAGES[name] = (plan, fn)
        return fn
    return wrap


def _stages(cfg: StudyConfig) -> list[str]:
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise PrbenchError(f"stage(s) {', '.join(unknown)} are not available in this installation")
    return [s for s in STAGE_ORDER if s in cfg.stages]


def plan_study(cfg: StudyConfig, root: Path) -> list[PlannedRun]:
    """What a study would do, with estimated model calls and tokens, without running anything."""
    from prbench.study import stages  # noqa: F401  (registers the stages)

    ctx = StudyContext(cfg, root, quiet=True)
    return [run for name in _stages(cfg) for run in STAGES[name][0](ctx)]


def run_study(cfg: StudyConfig, root: Path, quiet: bool = False) -> StudyContext:
    """Run every configured stage in order; returns the context with each stage's outputs."""
    from prbench.study import stages  # noqa: F401

    ctx = StudyContext(cfg, root, quiet=quiet)
    ctx.out.mkdir(parents=True, exist_ok=True)
    names = _stages(cfg)
    timings: dict[str, float] = {}
    with progress(quiet) as bar:
        overall = bar.add_task(escape(f"study {cfg.name}"), total=len(names))
        ctx.outputs["progress"] = bar
        for name in names:
            bar.update(overall, description=escape(f"study {cfg.name}: {name}"))
            t0 = time.time()
            STAGES[name][1](ctx)
            timings[name] = round(time.time() - t0, 2)
            bar.advance(overall)
    ctx.outputs.pop("progress", None)
    ctx.outputs["timings"] = timings
    return ctx
