"""Run a study's stages in order, each through the same API (and run folders) as its command.

Every stage is resumable on its own (run folders + content-hash caches), so re-running a
study skips finished work, and changing one model's entry reruns only that model's runs:
run folders are keyed by (spec, options, data, condition).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from prbench.errors import PrbenchError
from prbench.registry import STAGES
from prbench.runtime.progress import progress
from prbench.store.runs import close_under
from prbench.study.config import StudyConfig, resolve_specs, stage_sections
from prbench.study.context import PlannedRun, Stage, StudyContext


def _stages(cfg: StudyConfig) -> list[Stage]:
    """The configured stages, each resolved through the stage registry, in the order of their ranks."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise PrbenchError("; ".join(STAGES.unknown(s) for s in unknown))
    for loc, msg in stage_sections(cfg):  # a config built in code, not loaded from YAML
        raise PrbenchError(f"study config: {'.'.join(map(str, loc))}: {msg}")
    found: list[Any] = [STAGES.get(s) for s in dict.fromkeys(cfg.stages)]  # each a Stage
    return sorted(found, key=lambda st: st.order)


def plan_study(cfg: StudyConfig, root: Path) -> list[PlannedRun]:
    """What a study would do, with estimated model calls and tokens, without running anything."""
    ctx = StudyContext(resolve_specs(cfg, root), root, quiet=True)
    return [run for st in _stages(ctx.cfg) for run in st.plan(ctx)]


def run_study(cfg: StudyConfig, root: Path, quiet: bool = False) -> StudyContext:
    """Run every configured stage in order; returns the context with each stage's outputs.

    Every spec is resolved and every stage found before anything is written, so a bad config
    leaves no folder behind; a study folder this call created and left empty is removed.
    """
    ctx = StudyContext(resolve_specs(cfg, root), root, quiet=quiet)
    names = _stages(ctx.cfg)
    created = not ctx.out.exists()
    ctx.out.mkdir(parents=True, exist_ok=True)
    try:
        timings = _run_stages(ctx, names, quiet)
    except BaseException:
        close_under(ctx.out)  # run folders that got no record remove themselves
        if created and not any(ctx.out.iterdir()):
            ctx.out.rmdir()
        raise
    ctx.progress = None
    ctx.outputs.timings = timings
    return ctx


def _run_stages(ctx: StudyContext, names: list[Stage], quiet: bool) -> dict[str, float]:
    cfg = ctx.cfg
    timings: dict[str, float] = {}
    with progress(quiet) as bar:
        overall = bar.add_task(escape(f"study {cfg.name}"), total=len(names), eta=False)  # stages differ in cost
        ctx.progress = bar
        for st in names:
            bar.update(overall, description=escape(f"study {cfg.name}: {st.name}"))
            t0 = time.time()
            st.run(ctx)
            timings[st.name] = round(time.time() - t0, 2)
            bar.advance(overall)
    return timings
