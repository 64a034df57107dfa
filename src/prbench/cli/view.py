"""`prbench view`: the interactive results viewer (`prbench.viewer`), served on 127.0.0.1 or written as a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def view_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders, or folders holding runs (any kind prbench writes).")],
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: a free one).")] = 0,
    bundle: Annotated[Path | None, typer.Option("--bundle", help="Write the viewer as one static folder here (opens "
                                                "from file:// or any static host) instead of serving it.")] = None,
) -> None:
    """Browse runs per person in a browser.

    Views: leaderboard, people x RM grid, one pair, two RMs compared, downstream; each with a deep link."""
    from prbench.viewer import collect, serve, write_bundle

    if bundle is not None:
        data = collect(runs)
        folder = write_bundle(runs, bundle, data=data)
        for line in data["skipped"]:
            typer.echo(line, err=True)
        typer.echo(f"wrote {folder / 'index.html'} ({len(data['runs'])} eval runs, {len(data['others'])} other runs, "
                   f"{len(data['skipped'])} skipped)")
        return
    serve(runs, port, ready=lambda url: typer.echo(f"serving the viewer at {url} (Ctrl-C stops it)"))
