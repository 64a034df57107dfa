"""`prbench sample`: N answers per item from a policy, drawn once for every RM's Best-of-N."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import Json, Overwrite, Quiet, engine_options, settings_command
from prbench.cli.output import emit_json, progress
from prbench.config import EngineAccess, SampleSettings


@settings_command(settings=SampleSettings, access=EngineAccess)
def sample(
    policy: Annotated[str, typer.Option("--policy", "-p", help="Policy engine: hf:DIR, builtin:NAME, openai:MODEL.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Samples folder (resumable).")],
    settings: SampleSettings,
    access: EngineAccess,
    data: Annotated[str, typer.Option("--data", "-d", help="File, folder, hub dataset id, or 'sample'.")] = "sample",
    overwrite: Overwrite = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Draw N answers per item from a policy. Drawn once, for every RM's Best-of-N."""
    from prbench.capabilities.sample.driver import sample_policy

    opts = engine_options(policy, **access.model_dump(), batch_size=settings.batch_size)
    with progress(quiet or json_out) as bar:
        task = bar.add_task("sampling", total=None)
        ss = sample_policy(policy, data, out, settings=settings, engine_options=opts, overwrite=overwrite,
                           on_progress=lambda d, t: bar.update(task, completed=d, total=t))
    summary = {"path": str(ss.path), "items": len(ss.items), "n": ss.n}
    if json_out:
        emit_json(summary)
    elif not quiet:
        typer.echo(f"{len(ss.items)} items x {ss.n} samples in {ss.path}")
