"""What the policy commands share (`prbench rgd`, `prbench policy-accuracy` and `prbench icl`, each in its
package of `prbench.capabilities`): the policy, RM and grader options, the w sweep, table cells.

Plain functions: `prbench.cli.COMMANDS` and the run kinds' `command` name them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from prbench.cli.options import (
    engine_options,
    grader_engine_options,
    model_options,
    split_csv,
)
from prbench.cli.output import progress
from prbench.config import EngineAccess, GraderAccess
from prbench.store.records import GenerationSummary

if TYPE_CHECKING:
    from rich.progress import TaskID

Policy = Annotated[str, typer.Option("--policy", "-p", help="Policy: hf:DIR, hf:HUB_ID or builtin:smollm2-135m-instruct.")]
RMs = Annotated[list[str], typer.Option("--rm", "-m", help="Pointwise RM spec (repeatable): baseline:embedding, hf:DIR, pmi:ENGINE ...")]
Ws = Annotated[str, typer.Option("--w", help="Reward weight(s), comma-separated (e.g. 0,0.5,1); 0 = the plain policy.")]
Grader = Annotated[str | None, typer.Option("--grader", "-g", help="Rubric grader: openai:MODEL, hf:DIR, builtin:NAME or embedding:ENCODER.")]
R = TypeVar("R")  # what one run of the sweep returns (`GenerationRun`, `PAResult`)
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Results root (one sub-folder per setting).")]


def _floats(value: str) -> list[float]:
    try:
        vals = [float(v) for v in (split_csv(value) or [])]
    except ValueError:
        raise typer.BadParameter(f"--w must be numbers separated by commas, got {value!r}") from None
    if not vals:
        raise typer.BadParameter("--w needs at least one value")
    return vals


def _sweep(policy: str, specs: list[str], w: str, settings: Any, access: EngineAccess, quiet: bool,
           run_one: Callable[[Any, Any, float, Callable[[int, int], None]], R], **rm_flags: Any) -> list[R]:
    """Run `run_one(policy engine, rm, w, on_progress)` for every RM x weight (the policy and each RM loaded once);
    their results in that order. `rm_flags`: the command's RM flags and `-M` pairs (`model_option`)."""
    from prbench.downstream.decoding import load_policy
    from prbench.rewards.base import load_rm

    ws = _floats(w)
    engine = load_policy(policy, engine_options(policy, **access.model_dump(), batch_size=settings.batch_size))
    rm_options = model_options(specs, rm_flags.pop("model_option"), batch_size=settings.rm_batch_size,
                               **rm_flags, **access.model_dump())
    results = []
    with progress(quiet) as bar:
        for spec in specs:
            rm_obj = load_rm(spec, **{"seed": settings.seed, **rm_options[spec]})
            for wv in ws:
                task = bar.add_task(f"{spec} w={wv:g}", total=None)

                def on_progress(done: int, total: int, task: TaskID = task) -> None:
                    bar.update(task, completed=done, total=total)

                results.append(run_one(engine, rm_obj, wv, on_progress))
    return results


def _grader(spec: str | None, access: EngineAccess, grader_access: GraderAccess) -> Any:
    if not spec:
        return None
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache

    return load_grader(spec, cache=Cache(namespace="grades"),
                       engine_options=grader_engine_options(spec, access, grader_access))


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.3f}"


def _gold_cell(summary: GenerationSummary, metric: str = "rouge1") -> str:
    m = summary.gold.metrics.get(metric) if summary.gold else None
    if m is None or m.mean is None:
        return "-"
    return f"{m.mean:.3f} [{_fmt(m.ci_low)}, {_fmt(m.ci_high)}]"
